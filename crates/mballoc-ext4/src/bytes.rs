//! Little-endian field reads. Callers pass offsets inside buffers whose
//! size they have checked; an offset past the end is a bug in this crate.

pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// A 64-bit value split into a low 32-bit field and an optional high one.
pub(crate) fn lo_hi(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}
