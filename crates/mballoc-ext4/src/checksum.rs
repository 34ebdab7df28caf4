//! The two checksums ext4 stores: CRC32C (metadata_csum) and CRC16
//! (gdt_csum / uninit_bg group descriptors).
//!
//! ext4 chains CRC32C *without* the final inversion: the value stored is
//! the raw register after feeding the bytes, starting from a seed (~0 for
//! the superblock, the volume's checksum seed otherwise).

/// Raw CRC32C register after feeding `data` into `seed`.
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    // The crate computes the standard, inverted-in and inverted-out form.
    !crc32c::crc32c_append(!seed, data)
}

/// CRC16 with polynomial 0x8005 (bit-reflected 0xA001), no inversions, as
/// the uninit_bg descriptor checksum uses.
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &b in data {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The standard check value of CRC32C over "123456789" is 0xE3069283
        // (inverted in and out); the raw register is its complement.
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xE306_9283);
        // Chaining equals one pass.
        assert_eq!(crc32c_raw(crc32c_raw(7, b"1234"), b"56789"), crc32c_raw(7, b"123456789"));
    }

    #[test]
    fn crc16_matches_the_arc_check_value() {
        // CRC-16/ARC (poly 0x8005 reflected, init 0) of "123456789" is 0xBB3D.
        assert_eq!(crc16(0, b"123456789"), 0xBB3D);
    }
}
