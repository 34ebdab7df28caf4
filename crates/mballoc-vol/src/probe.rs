//! What a device already holds, before mkfs destroys it: a volume of this
//! format, another file system, a partition table, swap or an encrypted
//! container, recognized by the signatures their own tools write.

use crate::device::Device;
use crate::format::MAGIC;

/// Bytes read from the start of the device to recognize a signature.
const PROBE_BYTES: usize = 128 << 10;

/// `(byte offset, bytes, what holds them)`, checked in order.
const SIGNATURES: &[(usize, &[u8], &str)] = &[
    (0, &MAGIC.to_le_bytes(), "an mballoc volume"),
    (1024 + 0x38, &[0x53, 0xEF], "an ext2/3/4 file system"),
    (0, b"XFSB", "an XFS file system"),
    (0x10040, b"_BHRfS_M", "a btrfs file system"),
    (0, b"LUKS\xBA\xBE", "a LUKS encrypted volume"),
    (0, b"hsqs", "a squashfs image"),
    (0x8001, b"CD001", "an ISO 9660 image"),
    (4096 - 10, b"SWAPSPACE2", "swap space"),
    (4096 - 10, b"SWAP-SPACE", "swap space"),
    (512, b"EFI PART", "a GPT partition table"),
    (510, &[0x55, 0xAA], "a partition table or boot sector"),
];

/// What `dev` holds, if a known signature is there.
pub fn probe(dev: &dyn Device) -> std::io::Result<Option<&'static str>> {
    let n = (dev.len().min(PROBE_BYTES as u64)) as usize;
    let mut head = vec![0u8; n];
    dev.read_at(0, &mut head)?;
    Ok(SIGNATURES.iter().find(|(at, sig, _)| head.get(*at..at + sig.len()) == Some(sig)).map(|s| s.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn signatures_are_recognized_and_zeros_are_not() {
        let dev = MemDevice::new(256 << 10);
        assert_eq!(probe(&dev).unwrap(), None);
        dev.write_at(1024 + 0x38, &[0x53, 0xEF]).unwrap();
        assert_eq!(probe(&dev).unwrap(), Some("an ext2/3/4 file system"));
        let small = MemDevice::new(600);
        small.write_at(510, &[0x55, 0xAA]).unwrap();
        assert_eq!(probe(&small).unwrap(), Some("a partition table or boot sector"));
    }
}
