//! The image's namespace for the engine: its directories carried as
//! engine directories, each with its entries record by record, so that
//! an [`Ext4Namespace`] grows them and places new inodes as ext4 would.

use super::{load_carrying, Directories, Loaded};
use crate::bytes::{le16, le32};
use crate::directory::Entry;
use crate::error::{Ext4Error, Result};
use crate::inode::{FileType, MappingKind, ROOT_INO};
use crate::source::BlockSource;
use crate::superblock::{compat, incompat};
use crate::volume::Ext4Volume;
use mballoc_fs::{DirFormat, DirHash, DirLayout, Ext4Namespace, FileId, FsConfig, HashChars, Record};

/// An engine from an image, with the image's namespace.
pub struct WithNamespace {
    /// The engine and its regular files.
    pub loaded: Loaded,
    /// ext4's directories over it.
    pub namespace: Ext4Namespace,
    /// Each directory's path ("/" for the root) and id.
    pub dirs: Vec<(String, FileId)>,
}

/// `s_flags` bit: the volume hashes names as unsigned bytes.
const UNSIGNED_HASH: u32 = 0x2;
/// `s_def_hash_version` of half-MD4.
const HALF_MD4: u8 = 1;

/// Load the image as [`crate::engine::load`] does, its directories too.
/// Refused when names are hashed or compared in a way the model does not
/// follow (another default hash, casefolding, encryption).
///
/// `percpu_batch` is the kernel's `percpu_counter_batch` on the machine
/// being modelled (`max(32, 2 × online CPUs)`).
pub fn load_with_namespace<S: BlockSource>(
    vol: &Ext4Volume<S>,
    configure: impl FnOnce(&mut FsConfig),
    percpu_batch: u32,
) -> Result<WithNamespace> {
    let sb = vol.superblock();
    let refuse = |why: &str| Err(Ext4Error::Unsupported(format!("the namespace of this volume: {why}")));
    if sb.feature_incompat & (incompat::CASEFOLD | incompat::ENCRYPT) != 0 {
        return refuse("casefolded or encrypted names are not modelled");
    }
    if sb.has_compat(compat::DIR_INDEX) && sb.def_hash_version != HALF_MD4 {
        return refuse(&format!(
            "directory hash {} (only half-MD4, mke2fs's default, is modelled)",
            sb.def_hash_version
        ));
    }
    let format = DirFormat {
        block_size: sb.block_size,
        checksums: sb.metadata_csum(),
        indexed: sb.has_compat(compat::DIR_INDEX),
        hash: DirHash {
            seed: sb.hash_seed,
            chars: if sb.flags & UNSIGNED_HASH != 0 { HashChars::Unsigned } else { HashChars::Signed },
        },
    };
    let loaded = load_carrying(vol, configure, Directories::AsFiles)?;
    let used_dirs = vol.groups().iter().map(|d| d.used_dirs).collect();
    let mut namespace = Ext4Namespace::new(&loaded.fs, format, FileId(u64::from(ROOT_INO)), used_dirs, percpu_batch)
        .map_err(|e| Ext4Error::Unsupported(format!("the namespace of this volume: {e}")))?;
    let mut dirs = Vec::new();
    for e in vol.walk()?.entries.iter().filter(|e| e.inode.file_type() == FileType::Directory) {
        let id = FileId(u64::from(e.inode.ino));
        let children = vol
            .read_dir(&e.inode, &e.map)?
            .into_iter()
            .filter(|c| c.name != b"." && c.name != b"..")
            .map(|c| (c.name, FileId(u64::from(c.ino))));
        namespace.import_dir(id, layout(vol, e, format), children);
        dirs.push((e.path.clone(), id));
    }
    Ok(WithNamespace { loaded, namespace, dirs })
}

/// Directory `e`'s records block by block, or why they are not followed.
fn layout<S: BlockSource>(vol: &Ext4Volume<S>, e: &Entry, format: DirFormat) -> std::result::Result<DirLayout, String> {
    if e.map.kind == MappingKind::Inline {
        return Err("an inline directory".into());
    }
    if e.inode.is_indexed() {
        return Err("an indexed directory on the image (its index is not read)".into());
    }
    let bs = u64::from(format.block_size);
    let region = format.block_size as usize - if format.checksums { 12 } else { 0 };
    let filetype = vol.superblock().has_incompat(incompat::FILETYPE);
    let mut blocks = Vec::new();
    for l in 0..e.inode.size.div_ceil(bs) {
        let x = e
            .map
            .extents
            .iter()
            .find(|x| x.logical <= l && l < x.logical + u64::from(x.len) && !x.unwritten)
            .ok_or_else(|| format!("block {l} is a hole"))?;
        let raw = vol.read_block("directory block", x.physical + (l - x.logical)).map_err(|e| e.to_string())?;
        let mut recs = Vec::new();
        let mut pos = 0;
        while pos < region {
            if pos + 8 > region {
                return Err(format!("block {l}: a record header at byte {pos} runs past the entries"));
            }
            let len = crate::directory::rec_len(le16(&raw, pos + 4), format.block_size as usize);
            let name_len = if filetype { usize::from(raw[pos + 6]) } else { usize::from(le16(&raw, pos + 6)) };
            let live = le32(&raw, pos) != 0;
            if len < 8 || pos + len > region || (live && 8 + name_len > len) {
                return Err(format!("block {l}: a record of {len} bytes at byte {pos}"));
            }
            let name: Box<[u8]> = if live { Box::from(&raw[pos + 8..pos + 8 + name_len]) } else { Box::default() };
            recs.push(Record { name, rec_len: len as u32 });
            pos += len;
        }
        blocks.push(recs);
    }
    DirLayout::linear(format, blocks).map_err(|e| format!("{e:?}"))
}
