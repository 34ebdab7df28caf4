//! Trimming free space (`FITRIM`): each free run of the allocator in a
//! range is taken out of every allocation while the device is told it
//! holds nothing, then given back, as ext4's `ext4_trim_fs` marks a run
//! used around its discard. The run is first claimed from the promise
//! counter, so nothing that was promised space can find it missing.

use super::Fs;

impl Fs {
    /// Hand every free run of at least `min_len` blocks inside blocks
    /// `[first, end)` to `discard`, each held out of every allocation
    /// while it runs; returns the blocks handed over. Runs that another
    /// call takes meanwhile are skipped; a `discard` error stops the trim
    /// (the run is given back first).
    pub fn trim(
        &self,
        first: u64,
        end: u64,
        min_len: u64,
        mut discard: impl FnMut(u64, u64) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let _op = self.op();
        let mut runs = Vec::new();
        self.alloc.for_each_free_extent(|s, n| {
            let (a, b) = (s.max(first), (s + n).min(end));
            if b > a && b - a >= min_len.max(1) {
                runs.push((a, b - a));
            }
        });
        let mut done = 0;
        for (s, n) in runs {
            if self.space.claim(n).is_err() {
                continue;
            }
            if self.alloc.claim(s, n).is_err() {
                // Taken since it was listed.
                self.space.unclaim(n);
                continue;
            }
            let r = discard(s, n);
            self.alloc.free(s, n).unwrap_or_else(|e| panic!("a run this trim claimed frees: {e}"));
            self.space.unclaim(n);
            r?;
            done += n;
        }
        Ok(done)
    }
}
