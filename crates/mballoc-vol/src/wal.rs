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

use crate::attr::{Attr, ATTR_FIXED, ATTR_TAG};
use crate::codec::{get32, get64, put32, put64};
use crate::device::Device;
use crate::error::{Result, VolError};
use crate::format::{tx_blocks, tx_capacity, Superblock, TX_HEADER as HEADER};
use mballoc_fs::{Change, ExtentState};

/// One journal record: a change the engine made to a file, or an inode's
/// new name and attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// From the engine.
    File(Change),
    /// From the directory tree ([`crate::names`]).
    Attr {
        /// The inode.
        ino: u64,
        /// All of its attributes, its name and parent among them.
        attr: Attr,
    },
}

impl Record {
    /// The inode the record is about.
    pub fn ino(&self) -> u64 {
        match self {
            Record::File(c) => c.ino(),
            Record::Attr { ino, .. } => *ino,
        }
    }

    /// The engine's change, if it is one.
    pub fn change(&self) -> Option<&Change> {
        match self {
            Record::File(c) => Some(c),
            Record::Attr { .. } => None,
        }
    }
}

const TX_MAGIC: u32 = 0x4E58_5442;
const COMMIT_MAGIC: u32 = 0x544D_4F43;

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
pub fn decode(mut b: &[u8]) -> std::result::Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let total = b.len();
    while let Some((&tag, rest)) = b.split_first() {
        if tag == ATTR_TAG {
            let at = total - b.len();
            let (ino, attr, n) = Attr::decode_record(rest).map_err(|e| format!("{e} at byte {at}"))?;
            if ino == 0 || ino > u64::from(u32::MAX) {
                return Err(format!("record for inode {ino} at byte {at}"));
            }
            out.push(Record::Attr { ino, attr });
            b = &rest[n..];
            continue;
        }
        let Some(n) = fields(tag) else {
            return Err(format!("unknown record tag {tag} at byte {}", total - b.len()));
        };
        if rest.len() < n * 8 {
            return Err(format!("record cut short at byte {}", total - b.len()));
        }
        let x = |i: usize| get64(rest, i * 8);
        if x(0) == 0 || x(0) > u64::from(u32::MAX) {
            return Err(format!("record for inode {} at byte {}", x(0), total - b.len()));
        }
        let change = match tag {
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
            6 | 7 if x(1) > x(2) => {
                return Err(format!("range {}..{} runs backwards at byte {}", x(1), x(2), total - b.len()))
            }
            6 => Change::Unmap { ino: x(0), first: x(1), end: x(2) },
            _ => Change::Written { ino: x(0), first: x(1), end: x(2) },
        };
        if let Change::Map { len: 0, .. } = change {
            return Err(format!("empty extent at byte {}", total - b.len()));
        }
        out.push(Record::File(change));
        b = &rest[n * 8..];
    }
    Ok(out)
}

/// The changes of the running transaction, encoded. It may be split into
/// several journal transactions at any record boundary but inside a
/// group of changes that must commit together.
#[derive(Debug, Default)]
pub struct Running {
    bytes: Vec<u8>,
    /// Byte ranges of groups of more than one change, in order.
    groups: Vec<(usize, usize)>,
}

impl Running {
    /// Append changes that may be split from what follows, not from each
    /// other.
    pub fn push(&mut self, changes: &[Change]) {
        let start = self.bytes.len();
        for c in changes {
            encode(c, &mut self.bytes);
        }
        if changes.len() > 1 {
            self.groups.push((start, self.bytes.len()));
        }
    }

    /// Append inodes' attributes, never split from each other.
    pub fn push_attrs(&mut self, attrs: &[(u64, &Attr)]) {
        let start = self.bytes.len();
        for (ino, attr) in attrs {
            attr.encode_record(*ino, &mut self.bytes);
        }
        if attrs.len() > 1 {
            self.groups.push((start, self.bytes.len()));
        }
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Split into pieces that each fit a journal of `log_blocks`, never
    /// inside a group, as byte ranges of [`Running::bytes`]. A group too
    /// large for the whole journal is split at record boundaries as a
    /// last resort (it cannot be atomic in any journal this size).
    pub fn chunks(&self, block_size: usize, log_blocks: u64) -> Vec<std::ops::Range<usize>> {
        let cap = tx_capacity(block_size, log_blocks);
        let mut out = Vec::new();
        let mut from = 0;
        while from < self.bytes.len() {
            let limit = from + cap;
            if self.bytes.len() <= limit {
                out.push(from..self.bytes.len());
                break;
            }
            let mut at = record_boundary(&self.bytes, from, limit);
            // The group the cut falls in, if any: cut before it instead.
            let i = self.groups.partition_point(|&(_, end)| end <= at);
            if let Some(&(start, _)) = self.groups.get(i).filter(|&&(start, _)| start < at) {
                if start > from {
                    at = start;
                }
            }
            out.push(from..at);
            from = at;
        }
        out
    }

    /// The encoded changes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Put `self[from..]` (a commit could not make it durable) in front
    /// of `later` (recorded since), keeping every group.
    pub fn restore_before(&self, from: usize, later: &mut Running) {
        let mut bytes = self.bytes[from..].to_vec();
        let mut groups: Vec<(usize, usize)> =
            self.groups.iter().filter(|&&(s, _)| s >= from).map(|&(s, e)| (s - from, e - from)).collect();
        let base = bytes.len();
        bytes.extend_from_slice(&later.bytes);
        groups.extend(later.groups.iter().map(|&(s, e)| (s + base, e + base)));
        *later = Running { bytes, groups };
    }
}

/// The last record boundary at or before `limit`, walking from `from`.
fn record_boundary(bytes: &[u8], from: usize, limit: usize) -> usize {
    let mut at = from;
    loop {
        let n = if bytes[at] == ATTR_TAG {
            1 + ATTR_FIXED + get64(bytes, at + 1 + 8) as usize
        } else {
            1 + 8 * fields(bytes[at]).expect("a payload this crate encoded")
        };
        if at + n > limit {
            // Every record fits one transaction: attribute strings are
            // held to `Superblock::max_attr_bytes`.
            assert!(at > from, "a record of {n} bytes passes a transaction's {} bytes", limit - from);
            return at;
        }
        at += n;
    }
}

/// Frame `payload` as transaction `seq` of `epoch`.
pub fn frame(payload: &[u8], seq: u64, epoch: u64, seed: u32, block_size: usize) -> Vec<u8> {
    let blocks = tx_blocks(payload.len(), block_size) as usize;
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
    /// Its sequence number.
    pub seq: u64,
    /// The epoch (checkpoint count) it was written in.
    pub epoch: u64,
    /// Journal-relative block where it starts.
    pub at: u64,
    /// Blocks it takes.
    pub blocks: u64,
    /// Its records, in order.
    pub changes: Vec<Record>,
}

/// What reading the journal found: the committed transactions to replay,
/// in order, and where the run of them ended.
#[derive(Debug, Default)]
pub struct Journal {
    /// Transactions that follow one another from journal block 0.
    pub found: Vec<Found>,
    /// The run ended at a transaction that is damaged, not merely torn:
    /// its commit block matched but it does not decode, or a later
    /// transaction of this epoch follows it. Replaying only what came
    /// before would lose committed changes.
    pub damage: Option<JournalDamage>,
    /// The highest sequence number of any committed transaction in the
    /// journal, of any epoch, replayed or not: the next epoch must start
    /// past it, or a transaction a repair dropped would look pending.
    pub max_seq: u64,
}

/// Where and how the journal is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalDamage {
    /// The volume block where the run stopped.
    pub block: u64,
    /// What is wrong there.
    pub detail: String,
    /// A committed transaction of this epoch with a later sequence number
    /// lies beyond it: dropping the rest would lose committed changes.
    pub followed: bool,
}

/// What [`read_tx`] found: a transaction, and whether it decoded.
type ReadTx = Option<(Found, std::result::Result<(), String>)>;

/// Which transactions [`read_tx`] accepts.
#[derive(Clone, Copy)]
enum Want {
    /// Sequence `seq` of the superblock's epoch: the next of the run.
    Next(u64),
    /// Any, of any epoch whose checksums match this volume.
    Any,
}

/// Read the transaction starting at journal block `at`, if it is one
/// `want` accepts: `Ok(None)` when the header or commit block does not
/// match (nothing, a torn write, or another transaction), `Err` when it
/// matches but does not decode.
fn read_tx(dev: &dyn Device, sb: &Superblock, at: u64, want: Want) -> Result<ReadTx> {
    let bs = sb.block_size as usize;
    let seed = sb.seed();
    let log = u64::from(sb.log_blocks);
    let block = sb.log_start + at;
    // The header's fields and checksum are in its first 32 bytes: the
    // search for later transactions reads no more of each block.
    let mut head = [0u8; 32];
    dev.read_at(sb.offset(block), &mut head).map_err(|e| VolError::io("reading the journal", e))?;
    let (tx_seq, epoch) = (get64(&head, 8), get64(&head, 16));
    let wanted = match want {
        Want::Next(seq) => seq == tx_seq && epoch == sb.checkpoints,
        Want::Any => true,
    };
    let valid_header =
        get32(&head, 0) == TX_MAGIC && get32(&head, 28) == crc32c::crc32c_append(seed, &head[..28]) && wanted;
    if !valid_header {
        return Ok(None);
    }
    let blocks = u64::from(get32(&head, 4));
    let payload = get32(&head, 24) as usize;
    if blocks < 2 || at + blocks > log || tx_blocks(payload, bs) != blocks {
        return Ok(None);
    }
    let mut tx = vec![0u8; blocks as usize * bs];
    dev.read_at(sb.offset(block), &mut tx).map_err(|e| VolError::io("reading the journal", e))?;
    let body = (blocks as usize - 1) * bs;
    let c = &tx[body..];
    let committed = get32(c, 0) == COMMIT_MAGIC
        && u64::from(get32(c, 4)) == blocks
        && get64(c, 8) == tx_seq
        && get64(c, 16) == epoch
        && get32(c, 24) == crc32c::crc32c_append(seed, &tx[..body])
        && get32(c, 28) == crc32c::crc32c_append(seed, &c[..28]);
    if !committed {
        return Ok(None);
    }
    let (changes, decoded) = match decode(&tx[HEADER..HEADER + payload]) {
        Ok(changes) => (changes, Ok(())),
        Err(d) => (Vec::new(), Err(d)),
    };
    Ok(Some((Found { seq: tx_seq, epoch, at, blocks, changes }, decoded)))
}

/// Whether transaction `seq` of the superblock's epoch is committed at
/// journal block `at` (a writer appended it).
pub fn committed_at(dev: &dyn Device, sb: &Superblock, at: u64, seq: u64) -> Result<bool> {
    if at + 2 > u64::from(sb.log_blocks) {
        return Ok(false);
    }
    Ok(read_tx(dev, sb, at, Want::Next(seq))?.is_some())
}

/// Every committed transaction from journal block 0 on, in order, until
/// the first block that does not continue the sequence. The rest of the
/// journal is then searched for committed transactions that should not be
/// there if the run ended at a torn tail and the superblock is the one
/// the last checkpoint wrote:
///
/// * one of this epoch with a later sequence number: damage in the middle
///   of the run;
/// * one of this epoch numbered before the superblock's first sequence:
///   the superblock's sequence moved forward;
/// * one of an earlier epoch numbered at or past the superblock's first
///   sequence (a checkpoint always starts the next epoch past every
///   transaction it wrote home), or of a later epoch: the superblock's
///   epoch moved without a checkpoint.
///
/// Each would drop committed transactions without a word, so each is
/// damage that a committed transaction follows.
pub fn scan(dev: &dyn Device, sb: &Superblock) -> Result<Journal> {
    let log = u64::from(sb.log_blocks);
    let mut out = Journal::default();
    let (mut at, mut seq) = (0u64, sb.log_seq);
    while at + 2 <= log {
        match read_tx(dev, sb, at, Want::Next(seq))? {
            Some((f, Ok(()))) => {
                at += f.blocks;
                seq += 1;
                out.max_seq = out.max_seq.max(f.seq);
                out.found.push(f);
            }
            Some((_, Err(d))) => {
                let detail = format!("transaction {seq} passes its checksums but does not decode: {d}");
                out.damage = Some(JournalDamage { block: sb.log_start + at, detail, followed: false });
                break;
            }
            None => break,
        }
    }
    let epoch = sb.checkpoints;
    let mut unexplained = None;
    for later in at..log.saturating_sub(1) {
        let Some((f, _)) = read_tx(dev, sb, later, Want::Any)? else { continue };
        out.max_seq = out.max_seq.max(f.seq);
        if unexplained.is_some() {
            continue;
        }
        let block = sb.log_start + later;
        let (tx, first) = (f.seq, sb.log_seq);
        unexplained = if f.epoch == epoch && tx > seq {
            Some(format!("transaction {tx} (block {block}) follows"))
        } else if f.epoch == epoch && tx < first {
            Some(format!(
                "transaction {tx} (block {block}) of this epoch comes before the superblock's first sequence \
                 {first}: the superblock's sequence moved forward"
            ))
        } else if (f.epoch < epoch && tx >= first) || f.epoch > epoch {
            Some(format!(
                "transaction {tx} (block {block}) of epoch {} was never written home, yet the superblock \
                 is at epoch {epoch} from sequence {first}",
                f.epoch
            ))
        } else {
            None
        };
    }
    if let Some(found) = unexplained {
        match &mut out.damage {
            Some(d) => {
                d.followed = true;
                d.detail = format!("{}; {found}", d.detail);
            }
            None => {
                let detail = format!("the run of transactions stops at sequence {seq}, yet {found}");
                out.damage = Some(JournalDamage { block: sb.log_start + at, detail, followed: true });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_chunk_at_boundaries() {
        let cs = [
            Change::Create { ino: 12 },
            Change::Map { ino: 12, logical: 3, physical: 99, len: 7, state: ExtentState::Unwritten },
            Change::Written { ino: 12, first: 3, end: 5 },
            Change::Size { ino: 12, size: 1 << 20 },
            Change::Unmap { ino: 12, first: 0, end: u64::MAX },
            Change::Unlink { ino: 12 },
        ];
        let mut b = Vec::new();
        cs.iter().for_each(|c| encode(c, &mut b));
        let link = crate::attr::Link { parent: 1, name: b"f".to_vec() };
        let named = crate::names::Attr { mode: 0o100_644, links: vec![link], ..Default::default() };
        named.encode_record(12, &mut b);
        let attr_len = named.encoded_len();
        let mut want: Vec<Record> = cs.iter().map(|&c| Record::File(c)).collect();
        want.push(Record::Attr { ino: 12, attr: named });
        assert_eq!(decode(&b).unwrap(), want);
        assert!(decode(&b[..b.len() - 1]).is_err());
        assert_eq!(
            record_boundary(&b, 0, b.len() - 1),
            b.len() - (1 + ATTR_FIXED + attr_len),
            "attribute records have a length"
        );
        let mut many = Running::default();
        for i in 0..2000 {
            many.push(&[Change::Size { ino: 12, size: i }]);
        }
        let parts = many.chunks(1024, 8);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| tx_blocks(p.len(), 1024) <= 8 && p.len() % 17 == 0));
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), many.bytes.len());
        // What a failed commit puts back comes before what was recorded
        // since, and splits at the same places.
        let mut later = Running::default();
        later.push(&[Change::Create { ino: 99 }]);
        many.restore_before(parts[1].start, &mut later);
        let back = decode(later.bytes()).unwrap();
        assert_eq!(back.len(), 2000 - parts[0].len() / 17 + 1);
        assert_eq!(back.last(), Some(&Record::File(Change::Create { ino: 99 })));
        assert_eq!(later.chunks(1024, 8)[0], 0..parts[1].len());
    }

    #[test]
    fn a_group_is_never_split_across_transactions() {
        let mut r = Running::default();
        let pair = [Change::Unmap { ino: 12, first: 5, end: u64::MAX }, Change::Size { ino: 12, size: 5000 }];
        for i in 0..400 {
            r.push(&[Change::Size { ino: 13, size: i }]);
            r.push(&pair);
        }
        let mut pair_bytes = Vec::new();
        pair.iter().for_each(|c| encode(c, &mut pair_bytes));
        for part in r.chunks(1024, 8) {
            let changes = decode(&r.bytes()[part]).unwrap();
            // Every Unmap of inode 12 is followed by its Size in the same piece.
            for (i, c) in changes.iter().enumerate() {
                if matches!(c, Record::File(Change::Unmap { .. })) {
                    assert_eq!(changes.get(i + 1), Some(&Record::File(pair[1])));
                }
            }
        }
    }
}
