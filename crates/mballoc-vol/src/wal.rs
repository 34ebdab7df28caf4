//! The write-ahead journal: changes framed into transactions, each a
//! header block, payload blocks and a commit block whose crc32c covers
//! everything before it. A transaction counts only if its commit block
//! matches, so a torn or half-written one is ignored as a whole.
//!
//! The journal is linear: after each checkpoint the superblock says
//! "replay from journal block 0, starting at sequence S, epoch E", and
//! transactions follow one another from there. Sequence numbers and the
//! epoch (the checkpoint count) are in every header, so stale transactions
//! left over from before a checkpoint never match.

use crate::codec::{get32, get64, put32, put64};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::Superblock;
use mballoc_fs::{Change, ExtentState};

const TX_MAGIC: u32 = 0x4E58_5442;
const COMMIT_MAGIC: u32 = 0x544D_4F43;
/// Bytes of the header block before the payload.
const HEADER: usize = 48;

/// Append one change in its journal encoding.
pub fn encode(c: &Change, out: &mut Vec<u8>) {
    let mut put = |tag: u8, xs: &[u64]| {
        out.push(tag);
        for x in xs {
            out.extend_from_slice(&x.to_le_bytes());
        }
    };
    match *c {
        Change::Create { ino } => put(1, &[ino]),
        Change::Unlink { ino } => put(2, &[ino]),
        Change::Size { ino, size } => put(3, &[ino, size]),
        Change::Map { ino, logical, physical, len, state } => {
            let tag = if state == ExtentState::Unwritten { 5 } else { 4 };
            put(tag, &[ino, logical, physical, u64::from(len)])
        }
        Change::Unmap { ino, first, end } => put(6, &[ino, first, end]),
        Change::Written { ino, first, end } => put(7, &[ino, first, end]),
    }
}

/// The u64 fields that follow a record's tag, or `None` for an unknown tag.
fn fields(tag: u8) -> Option<usize> {
    match tag {
        1 | 2 => Some(1),
        3 => Some(2),
        4 | 5 => Some(4),
        6 | 7 => Some(3),
        _ => None,
    }
}

/// Decode a payload. An error names the byte where decoding stopped.
pub fn decode(mut b: &[u8]) -> std::result::Result<Vec<Change>, String> {
    let mut out = Vec::new();
    let total = b.len();
    while let Some((&tag, rest)) = b.split_first() {
        let Some(n) = fields(tag) else {
            return Err(format!("unknown record tag {tag} at byte {}", total - b.len()));
        };
        if rest.len() < n * 8 {
            return Err(format!("record cut short at byte {}", total - b.len()));
        }
        let x = |i: usize| get64(rest, i * 8);
        out.push(match tag {
            1 => Change::Create { ino: x(0) },
            2 => Change::Unlink { ino: x(0) },
            3 => Change::Size { ino: x(0), size: x(1) },
            4 | 5 => Change::Map {
                ino: x(0),
                logical: x(1),
                physical: x(2),
                len: u32::try_from(x(3)).map_err(|_| format!("extent length {}", x(3)))?,
                state: if tag == 5 { ExtentState::Unwritten } else { ExtentState::Written },
            },
            6 => Change::Unmap { ino: x(0), first: x(1), end: x(2) },
            _ => Change::Written { ino: x(0), first: x(1), end: x(2) },
        });
        b = &rest[n * 8..];
    }
    Ok(out)
}

/// The largest record, so that a chunk boundary can always be found.
const MAX_RECORD: usize = 1 + 4 * 8;

/// Blocks a transaction with `payload` bytes takes.
pub fn blocks_for(payload: usize, block_size: usize) -> u64 {
    let first = block_size - HEADER;
    1 + payload.saturating_sub(first).div_ceil(block_size) as u64 + 1
}

/// Split an encoded payload at record boundaries into pieces that each fit
/// a journal of `log_blocks`.
pub fn chunks(payload: &[u8], block_size: usize, log_blocks: u64) -> Vec<&[u8]> {
    let cap = (block_size - HEADER) + (log_blocks as usize - 2) * block_size;
    assert!(cap >= MAX_RECORD, "journal too small for one record");
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        if rest.len() <= cap {
            out.push(rest);
            break;
        }
        // Walk records up to the capacity.
        let mut at = 0;
        while at < rest.len() {
            let n = 1 + 8 * fields(rest[at]).expect("a payload this crate encoded");
            if at + n > cap {
                break;
            }
            at += n;
        }
        out.push(&rest[..at]);
        rest = &rest[at..];
    }
    out
}

/// Frame `payload` as transaction `seq` of `epoch`.
pub fn frame(payload: &[u8], seq: u64, epoch: u64, seed: u32, block_size: usize) -> Vec<u8> {
    let blocks = blocks_for(payload.len(), block_size) as usize;
    let mut b = vec![0u8; blocks * block_size];
    put32(&mut b, 0, TX_MAGIC);
    put32(&mut b, 4, blocks as u32);
    put64(&mut b, 8, seq);
    put64(&mut b, 16, epoch);
    put32(&mut b, 24, payload.len() as u32);
    let hcrc = crc32c::crc32c_append(seed, &b[..28]);
    put32(&mut b, 28, hcrc);
    b[HEADER..HEADER + payload.len()].copy_from_slice(payload);
    let body = (blocks - 1) * block_size;
    let crc = crc32c::crc32c_append(seed, &b[..body]);
    let c = &mut b[body..];
    put32(c, 0, COMMIT_MAGIC);
    put32(c, 4, blocks as u32);
    put64(c, 8, seq);
    put64(c, 16, epoch);
    put32(c, 24, crc);
    let ccrc = crc32c::crc32c_append(seed, &c[..28]);
    put32(c, 28, ccrc);
    b
}

/// One committed transaction found by [`scan`].
#[derive(Debug)]
pub struct Found {
    pub seq: u64,
    /// Journal-relative block where it starts.
    pub at: u64,
    pub blocks: u64,
    pub changes: Vec<Change>,
}

/// Every committed transaction from journal block 0 on, in order; stops at
/// the first block that does not continue the sequence. A transaction that
/// matches its commit block but does not decode is corruption.
pub fn scan(dev: &dyn Device, sb: &Superblock) -> Result<Vec<Found>> {
    let bs = sb.block_size as usize;
    let seed = sb.seed();
    let log = u64::from(sb.log_blocks);
    let mut out = Vec::new();
    let (mut at, mut seq) = (0u64, sb.log_seq);
    let mut head = vec![0u8; bs];
    while at + 2 <= log {
        let block = sb.log_start + at;
        dev.read_at(sb.offset(block), &mut head).map_err(|e| VolError::io("reading the journal", e))?;
        let valid_header = get32(&head, 0) == TX_MAGIC
            && get32(&head, 28) == crc32c::crc32c_append(seed, &head[..28])
            && get64(&head, 8) == seq
            && get64(&head, 16) == sb.checkpoints;
        if !valid_header {
            break;
        }
        let blocks = u64::from(get32(&head, 4));
        let payload = get32(&head, 24) as usize;
        if blocks < 2 || at + blocks > log || blocks_for(payload, bs) != blocks {
            break;
        }
        let mut tx = vec![0u8; blocks as usize * bs];
        dev.read_at(sb.offset(block), &mut tx).map_err(|e| VolError::io("reading the journal", e))?;
        let body = (blocks as usize - 1) * bs;
        let c = &tx[body..];
        let committed = get32(c, 0) == COMMIT_MAGIC
            && u64::from(get32(c, 4)) == blocks
            && get64(c, 8) == seq
            && get64(c, 16) == sb.checkpoints
            && get32(c, 24) == crc32c::crc32c_append(seed, &tx[..body])
            && get32(c, 28) == crc32c::crc32c_append(seed, &c[..28]);
        if !committed {
            break;
        }
        let changes = decode(&tx[HEADER..HEADER + payload])
            .map_err(|d| VolError::corrupt("journal transaction", block, format!("sequence {seq}: {d}")))?;
        out.push(Found { seq, at, blocks, changes });
        at += blocks;
        seq += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_chunk_at_boundaries() {
        let cs = vec![
            Change::Create { ino: 12 },
            Change::Map { ino: 12, logical: 3, physical: 99, len: 7, state: ExtentState::Unwritten },
            Change::Written { ino: 12, first: 3, end: 5 },
            Change::Size { ino: 12, size: 1 << 20 },
            Change::Unmap { ino: 12, first: 0, end: u64::MAX },
            Change::Unlink { ino: 12 },
        ];
        let mut b = Vec::new();
        cs.iter().for_each(|c| encode(c, &mut b));
        assert_eq!(decode(&b).unwrap(), cs);
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut many = Vec::new();
        for i in 0..2000 {
            encode(&Change::Size { ino: 12, size: i }, &mut many);
        }
        let parts = chunks(&many, 1024, 8);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| blocks_for(p.len(), 1024) <= 8 && p.len() % 17 == 0));
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), many.len());
    }
}
