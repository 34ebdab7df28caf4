//! POSIX ACLs, kept as ext4 and the kernel's FUSE ACL support keep them:
//! the extended attributes `system.posix_acl_access` and
//! `system.posix_acl_default`, in the kernel's xattr form (version 2, then
//! entries of tag u16, permission u16, id u32).
//!
//! The kernel enforces an access ACL; the volume keeps it and the mode in
//! step, as ext4 does: setting an access ACL sets the mode's permission
//! bits from it (and an ACL that says no more than the mode is kept as
//! the mode alone), `chmod` rewrites the ACL's owner, mask (or group) and
//! other entries, and a new inode in a directory with a default ACL takes
//! its permissions from that ACL instead of the umask (a new directory
//! also inherits the default ACL itself).

use crate::attr::Attr;

/// The access ACL's attribute name.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's attribute name (directories only).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// One ACL: its entries in the order the kernel sorts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<(u16, u16, u32)>,
}

impl Acl {
    /// Parse and check an ACL as the kernel would accept it: version 2,
    /// one owner, owning-group and other entry each, a mask wherever
    /// there are named users or groups (and, as Linux allows, a mask
    /// without them), permissions in `rwx`.
    pub fn parse(b: &[u8]) -> Result<Acl, String> {
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(8) {
            return Err(format!("an ACL of {} bytes", b.len()));
        }
        if u32::from_le_bytes(b[..4].try_into().expect("four bytes")) != VERSION {
            return Err("an ACL of another version".into());
        }
        let entries: Vec<(u16, u16, u32)> = b[4..]
            .chunks(8)
            .map(|e| {
                (
                    u16::from_le_bytes([e[0], e[1]]),
                    u16::from_le_bytes([e[2], e[3]]),
                    u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
                )
            })
            .collect();
        let count = |t: u16| entries.iter().filter(|e| e.0 == t).count();
        if count(USER_OBJ) != 1 || count(GROUP_OBJ) != 1 || count(OTHER) != 1 || count(MASK) > 1 {
            return Err("an ACL without exactly one owner, group and other entry".into());
        }
        if count(USER) + count(GROUP) > 0 && count(MASK) == 0 {
            return Err("an ACL with named entries and no mask".into());
        }
        for &(tag, perm, _) in &entries {
            if ![USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].contains(&tag) || perm > 7 {
                return Err(format!("an ACL entry of tag {tag:#x}, permissions {perm:o}"));
            }
        }
        Ok(Acl { entries })
    }

    /// The kernel's xattr form.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in &self.entries {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&perm.to_le_bytes());
            b.extend_from_slice(&id.to_le_bytes());
        }
        b
    }

    fn perm_mut(&mut self, tag: u16) -> Option<&mut u16> {
        self.entries.iter_mut().find(|e| e.0 == tag).map(|e| &mut e.1)
    }

    fn perm(&self, tag: u16) -> u16 {
        self.entries.iter().find(|e| e.0 == tag).map_or(0, |e| e.1)
    }

    /// The group class: the mask if there is one, else the owning group.
    fn group_class(&self) -> u16 {
        if self.entries.iter().any(|e| e.0 == MASK) {
            MASK
        } else {
            GROUP_OBJ
        }
    }

    /// Whether the ACL says no more than permission bits do.
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }

    /// The permission bits the ACL gives (owner, group class, other).
    pub fn mode_bits(&self) -> u32 {
        u32::from(self.perm(USER_OBJ)) << 6
            | u32::from(self.perm(self.group_class())) << 3
            | u32::from(self.perm(OTHER))
    }

    /// `chmod`: the owner, group-class and other entries take `mode`'s
    /// bits.
    pub fn apply_mode(&mut self, mode: u32) {
        let class = self.group_class();
        for (tag, shift) in [(USER_OBJ, 6), (class, 3), (OTHER, 0)] {
            *self.perm_mut(tag).expect("checked at parse") = ((mode >> shift) & 7) as u16;
        }
    }

    /// A new inode's access ACL from its directory's default ACL and the
    /// mode it was created with: each class keeps what both allow.
    /// Returns the ACL and the inode's permission bits.
    pub fn inherit(&self, mode: u32) -> (Acl, u32) {
        let mut a = self.clone();
        let class = a.group_class();
        for (tag, shift) in [(USER_OBJ, 6), (class, 3), (OTHER, 0)] {
            let p = a.perm_mut(tag).expect("checked at parse");
            *p &= ((mode >> shift) & 7) as u16;
        }
        let bits = a.mode_bits();
        (a, bits)
    }
}

/// A new inode's attributes in directory `parent`: permissions from the
/// directory's default ACL if it has one (and the inode's access ACL, and
/// for a directory the default ACL too), else the mode less `umask`.
pub fn inherit(parent: &Attr, child: &mut Attr, umask: u32) {
    let default = parent.xattrs.get(ACL_DEFAULT).and_then(|d| Acl::parse(d).ok());
    let kind_bits = child.mode & !0o777;
    match default {
        Some(d) if !child.is_symlink() => {
            let (acl, bits) = d.inherit(child.mode & 0o777);
            child.mode = kind_bits | bits;
            if !acl.is_minimal() {
                child.xattrs.insert(ACL_ACCESS.to_vec(), acl.encode());
            }
            if child.is_dir() {
                child.xattrs.insert(ACL_DEFAULT.to_vec(), d.encode());
            }
        }
        _ => child.mode = kind_bits | (child.mode & 0o777 & !umask),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl::parse(&Acl { entries: entries.to_vec() }.encode()).unwrap()
    }

    #[test]
    fn acls_parse_as_the_kernel_accepts_them() {
        let named = acl(&[(USER_OBJ, 6, 0), (USER, 6, 65534), (GROUP_OBJ, 4, 0), (MASK, 6, 0), (OTHER, 0, 0)]);
        assert_eq!(named.mode_bits(), 0o660);
        assert!(!named.is_minimal());
        assert!(Acl::parse(&[2, 0, 0, 0]).is_err(), "no entries");
        let no_mask = Acl { entries: vec![(USER_OBJ, 6, 0), (USER, 6, 1), (GROUP_OBJ, 4, 0), (OTHER, 0, 0)] };
        assert!(Acl::parse(&no_mask.encode()).is_err(), "a named user needs a mask");
        // generic/529's: a mask and nothing named, which Linux accepts;
        // the group class is then the mask.
        let bare_mask = acl(&[(USER_OBJ, 0, 0), (GROUP_OBJ, 0, 0), (MASK, 4, 0), (OTHER, 0, 0)]);
        assert_eq!(bare_mask.mode_bits(), 0o040);
        assert!(!bare_mask.is_minimal());
        let mut bad = named.encode();
        bad[0] = 3;
        assert!(Acl::parse(&bad).is_err(), "version");
    }

    #[test]
    fn chmod_and_inheritance_follow_the_group_class() {
        let mut named = acl(&[(USER_OBJ, 7, 0), (USER, 7, 5), (GROUP_OBJ, 5, 0), (MASK, 7, 0), (OTHER, 5, 0)]);
        named.apply_mode(0o640);
        assert_eq!((named.perm(MASK), named.perm(GROUP_OBJ), named.mode_bits()), (4, 5, 0o640));
        let (child, bits) = named.inherit(0o666);
        assert_eq!((bits, child.perm(USER)), (0o640, 7), "named entries stay; the mask limits them");
        let mut parent = Attr { mode: 0o040_755, ..Attr::default() };
        parent.xattrs.insert(ACL_DEFAULT.to_vec(), named.encode());
        let mut file = Attr { mode: 0o100_666, ..Attr::default() };
        inherit(&parent, &mut file, 0o077);
        assert_eq!(file.mode, 0o100_640, "the umask does not apply under a default ACL");
        assert!(file.xattrs.contains_key(ACL_ACCESS) && !file.xattrs.contains_key(ACL_DEFAULT));
        let mut dir = Attr { mode: 0o040_777, ..Attr::default() };
        inherit(&parent, &mut dir, 0o077);
        assert!(dir.xattrs.contains_key(ACL_DEFAULT));
        let mut plain = Attr { mode: 0o100_666, ..Attr::default() };
        inherit(&Attr { mode: 0o040_755, ..Attr::default() }, &mut plain, 0o022);
        assert_eq!(plain.mode, 0o100_644);
    }
}
