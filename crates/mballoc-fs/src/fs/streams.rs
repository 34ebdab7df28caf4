//! Per-file stream placement: appends that survive interleaving.
//!
//! ext4 does not normalize an `fallocate` that fits one extent, so a file
//! grown by small fallocate appends gets no preallocation, and its requests
//! start wherever the volume's stream goal points and take the first free
//! chunk there. Sixty-four files appended in turn therefore take blocks in
//! turn: about 7,300 extents per 64 MiB file on a 2-CPU machine.
//!
//! [`StreamPlacement::PerFile`](crate::StreamPlacement::PerFile) treats every appending file as its own
//! stream instead:
//!
//! * An append first asks for the block just past the file's last one, so a
//!   file keeps growing in place for as long as that block is free.
//! * It asks for a window as large as the file already is (capped at
//!   [`APPEND_WINDOW_MAX`]) and keeps the surplus as the file's
//!   preallocation: a file that has grown to `n` blocks holds at most `n`
//!   blocks it has not used yet, a one-block file none. The window goes back
//!   on last close, truncate, punch, unlink, and under pressure, like every
//!   preallocation.
//! * A large file whose next block is taken starts again where it has room
//!   ([`Allocator::stream_start`](mballoc::Allocator::stream_start)): an
//!   unused group, or the upper half of the largest free run. A small file
//!   whose next block is taken moves to the upper half of the largest free
//!   run of its own group
//!   ([`Allocator::room_in_group`](mballoc::Allocator::room_in_group)). A
//!   file written alone never meets a taken block, so small files written
//!   one after another still pack; only files appended at the same time are
//!   pulled apart.
//!
//! Free space pays for it. A file grows in place only while the block after
//! its last one is free, and the free runs after two streams' ends are
//! different runs (the later stream's last block lies between them). So
//! files appended together leave at least one free extent per stream that
//! did not stop exactly against other data: 64 files appended in turn leave
//! 64, where ext4, whose files are in thousands of pieces, leaves a few. No
//! placement that keeps such files in a few extents each can leave fewer.
//!
//! [`StreamPlacement::Kernel`](crate::StreamPlacement::Kernel) keeps ext4's behaviour.

use super::{inc, FileNode, Fs, Inode};
use crate::alloc_log::ServedBy;
use crate::normalize::Placement;
use mballoc::{AllocRequest, Allocation};

/// Largest append window, in blocks (8 MiB at 4 KiB blocks).
pub const APPEND_WINDOW_MAX: u32 = 2048;

/// Times a stream start is picked again after another thread took it.
const START_ATTEMPTS: usize = 3;

impl Fs {
    /// An unnormalized request for logical `l`, `len` blocks, under per-file
    /// placement. `next_pa` is where the file's next preallocation begins.
    /// Returns the file's own part; a surplus becomes its preallocation.
    pub(super) fn allocate_appending(
        &self,
        node: &FileNode,
        ino: &Inode,
        l: u64,
        len: u32,
        place: Placement,
        next_pa: Option<u64>,
    ) -> Option<(u64, u32, ServedBy)> {
        let geo = self.alloc.geometry();
        let stream = (place == Placement::Stream).then_some(ino.id);
        // Only an append (nothing mapped further right) grows a window.
        let room = match (ino.map.right_of(l), next_pa) {
            (None, None) => u64::from(APPEND_WINDOW_MAX),
            (Some(e), None) => e.logical - l,
            (None, Some(p)) => p - l,
            (Some(e), Some(p)) => e.logical.min(p) - l,
        };
        let grow = ino.map.blocks().min(u64::from(APPEND_WINDOW_MAX));
        let want = (u64::from(len) + grow)
            .min(room.max(u64::from(len)))
            .min(u64::from(geo.blocks_per_group()))
            .min(crate::normalize::MAX_LOGICAL_BLOCKS.saturating_sub(l).max(u64::from(len))) as u32;
        let info = mballoc::WindowInfo { logical: l, len, file_blocks: ino.size.div_ceil(self.block_size()) };
        let want = self.alloc.policy().window(want, &info).clamp(len.min(want), want.max(len));
        let want = if want > len && self.may_preallocate(want) { want } else { len };
        let _flight = (want > len).then(|| self.track_window());

        let continuation =
            ino.map.left_of(l).and_then(|e| e.physical.checked_add(l - e.logical)).filter(|&g| g < geo.total_blocks());
        let ask = |req: AllocRequest| -> Option<Allocation> {
            inc(&self.counters.local().alloc_requests, 1);
            self.alloc.allocate(&req).ok()
        };
        let with_stream = |req: AllocRequest| match stream {
            Some(k) => req.stream(k),
            None => req,
        };
        let mut got = None;
        if let Some(goal) = continuation {
            got = ask(AllocRequest::new(want).goal_only(goal));
            if got.is_none() && want > len {
                got = ask(AllocRequest::new(len).goal_only(goal));
            }
        }
        let goal = self.policy_goal(ino, l, continuation);
        // Blocked (or new): a large file restarts where the volume has room,
        // a small one that met another file's blocks where its group has.
        let stream_restart = place == Placement::Stream;
        if got.is_none() && (stream_restart || continuation.is_some()) {
            let mut from = geo.group_of(goal);
            for _ in 0..START_ATTEMPTS {
                let start = if stream_restart {
                    self.alloc.stream_start(from, want)
                } else {
                    self.alloc.room_in_group(from, want)
                };
                let Some(start) = start else { break };
                got = ask(AllocRequest::new(want).goal_only(start));
                if got.is_some() {
                    break;
                }
                if stream_restart {
                    from = geo.group_of(start) + 1;
                }
            }
        }
        let a = match got {
            Some(a) => a,
            None => ask(with_stream(AllocRequest::new(want).original_len(len).goal(goal)))?,
        };
        let (start, got) = (a.extent.start, a.extent.len);
        let own = got.min(len);
        if got > own {
            let surplus = got - own;
            node.pas.lock().insert(l + u64::from(own), start + u64::from(own), surplus);
            self.prealloc(u64::from(surplus), u64::from(got));
            inc(&self.counters.local().inode_pas_created, 1);
        }
        Some((start, own, ServedBy::Allocator(a.found_by)))
    }
}
