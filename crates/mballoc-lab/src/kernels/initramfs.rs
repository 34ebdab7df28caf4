//! The guest's root file system: an uncompressed cpio archive ("newc",
//! the format the kernel unpacks into its initial tmpfs) holding a static
//! busybox, the host's own programs the command needs (this `mballoc`,
//! e2fsprogs, util-linux's mount, coreutils' cp) with the libraries their
//! loader names, the kernel's modules for virtio disks, loop devices and
//! ext4 (decompressed, loaded in dependency order), and `/init`.

use super::fetch::{output, Unpacked};
use crate::error::LabError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Modules the guest needs where the kernel does not build them in; each
/// comes with what modules.dep says it depends on. Absent ones are built
/// in (or not needed by that kernel).
const WANTED_MODULES: &[&str] =
    &["virtio_pci", "virtio_blk", "loop", "crc32c_intel", "crc32c_generic", "crc32c-intel", "crc32c_cryptoapi", "ext4"];

/// Host programs copied in, by name on the host's PATH; where one is
/// missing the guest's busybox applet of that name stands in.
const HOST_PROGRAMS: &[&str] =
    &["mke2fs", "mkfs.ext4", "e2fsck", "dumpe2fs", "debugfs", "filefrag", "e2image", "mount", "umount", "cp", "sync"];

/// An archive being written.
struct Cpio {
    bytes: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let name = name.trim_start_matches('/');
        let header = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.bytes.extend_from_slice(header.as_bytes());
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    fn file(&mut self, name: &str, data: &[u8], executable: bool) {
        self.entry(name, if executable { 0o100755 } else { 0o100644 }, data);
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}

/// What the archive holds, by path, before it is written: files with their
/// bytes and whether they run, and directories implied by them.
#[derive(Default)]
struct Tree {
    files: BTreeMap<String, (Vec<u8>, bool)>,
    links: BTreeMap<String, String>,
}

impl Tree {
    fn add_host_file(&mut self, guest: &str, host: &Path, executable: bool) -> Result<(), LabError> {
        let data = std::fs::read(host).map_err(|e| LabError::io(host.display().to_string(), e))?;
        self.files.insert(guest.to_string(), (data, executable));
        Ok(())
    }

    /// A host program and the libraries its loader resolves (ldd).
    fn add_program(&mut self, guest: &str, host: &Path) -> Result<(), LabError> {
        self.add_host_file(guest, host, true)?;
        let listing = output(Command::new("ldd").arg(host), "ldd").unwrap_or_default();
        for line in listing.lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)".
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
            };
            if let Some(lib) = path.filter(|p| p.starts_with('/')) {
                if !self.files.contains_key(lib) {
                    // The loader finds a library by the name it was linked
                    // to, so the real file goes where that name points.
                    let real = std::fs::canonicalize(lib).map_err(|e| LabError::io(lib.to_string(), e))?;
                    self.add_host_file(lib, &real, true)?;
                }
            }
        }
        Ok(())
    }

    fn write(self) -> Vec<u8> {
        let mut dirs = std::collections::BTreeSet::new();
        for path in self.files.keys().chain(self.links.keys()) {
            let mut p = Path::new(path).parent();
            while let Some(d) = p.filter(|d| *d != Path::new("/") && *d != Path::new("")) {
                dirs.insert(d.to_string_lossy().into_owned());
                p = d.parent();
            }
        }
        let mut cpio = Cpio { bytes: Vec::new(), ino: 0 };
        for d in dirs {
            cpio.dir(&d);
        }
        for (path, (data, exec)) in &self.files {
            cpio.file(path, data, *exec);
        }
        for (path, target) in &self.links {
            cpio.symlink(path, target);
        }
        cpio.finish()
    }
}

/// The first `name` on the host's PATH.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Module names (as modules.dep writes them, relative to the module
/// tree) for `wanted` and what they depend on, dependencies first.
fn module_order(kernel: &Unpacked) -> Result<Vec<String>, LabError> {
    let dep_file = kernel.modules().join("modules.dep");
    let deps = std::fs::read_to_string(&dep_file).map_err(|e| LabError::io(dep_file.display().to_string(), e))?;
    let table: BTreeMap<String, Vec<String>> = deps
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| (m.trim().to_string(), d.split_whitespace().map(str::to_string).collect()))
        .collect();
    let short = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split(".ko").next().unwrap_or(file).to_string()
    };
    let mut order = Vec::new();
    fn visit(m: &str, table: &BTreeMap<String, Vec<String>>, order: &mut Vec<String>) {
        if order.iter().any(|o| o == m) {
            return;
        }
        // modules.dep lists every dependency of a module, its own
        // dependencies' included, in the order they load in reverse.
        for d in table.get(m).into_iter().flatten().rev() {
            visit(d, table, order);
        }
        order.push(m.to_string());
    }
    for want in WANTED_MODULES {
        if let Some(m) = table.keys().find(|m| short(m) == *want) {
            visit(m, &table, &mut order);
        }
    }
    Ok(order)
}

/// A module's bytes, decompressed (busybox's insmod takes plain ELF).
fn module_bytes(path: &Path) -> Result<Vec<u8>, LabError> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else if name.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => std::fs::read(path).map_err(|e| LabError::io(name.into_owned(), e)),
        Some(t) => {
            let out = Command::new(t)
                .args(["-d", "-c"])
                .arg(path)
                .output()
                .map_err(|e| LabError::Unavailable(format!("{t} (to decompress {name}): {e}")))?;
            if !out.status.success() {
                return Err(LabError::Tool { program: t.into(), message: String::from_utf8_lossy(&out.stderr).into() });
            }
            Ok(out.stdout)
        }
    }
}

/// Quote `s` for the guest's shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The archive for `kernel` that runs `mballoc ARGS` as its workload and
/// writes what it printed onto the first virtio disk, followed by the
/// directory `bring` (relative to its working directory) as a tar archive.
pub fn build(kernel: &Unpacked, args: &[String], bring: Option<&str>) -> Result<Vec<u8>, LabError> {
    let mut tree = Tree::default();
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::Unavailable("no busybox (apt-get install busybox-static)".into()))?;
    tree.add_host_file("/bin/busybox", &busybox, true)?;
    let me = std::env::current_exe().map_err(|e| LabError::io("this program's path", e))?;
    tree.add_program("/bin/mballoc", &me)?;
    for name in HOST_PROGRAMS {
        if let Some(host) = which(name) {
            tree.add_program(&format!("/usr/sbin/{name}"), &host)?;
        }
    }
    let mut loads = String::new();
    for m in module_order(kernel)? {
        let bytes = module_bytes(&kernel.modules().join(&m))?;
        let file = m.rsplit('/').next().unwrap_or(&m);
        let plain = file.split(".ko").next().unwrap_or(file).to_string() + ".ko";
        tree.files.insert(format!("/modules/{plain}"), (bytes, false));
        loads.push_str(&format!("insmod /modules/{plain} 2>/dev/null\n"));
    }
    let command: Vec<String> = args.iter().map(|a| quote(a)).collect();
    let init = format!(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/usr/sbin:/bin HOME=/tmp\n\
         mkdir -p /proc /sys /dev /tmp /run /mnt\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n\
         mkdir -p /dev/shm\n\
         mount -t tmpfs shm /dev/shm\n\
         mount -t tmpfs tmp /tmp\n\
         mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null\n\
         mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null\n\
         {loads}\
         mkdir -p /etc && echo 'root:x:0:0:root:/tmp:/bin/sh' > /etc/passwd\n\
         echo '@@ mballoc guest: '$(uname -r)\n\
         cd /tmp\n\
         /bin/mballoc {} > /tmp/out 2> /tmp/err\n\
         rc=$?\n\
         : > /run/bring.tar\n\
         {bring}\
         for d in /dev/vda /dev/sda; do [ -b $d ] && break; done\n\
         {{ echo \"MBALLOC-GUEST rc=$rc out=$(stat -c %s /tmp/out) err=$(stat -c %s /tmp/err) tar=$(stat -c %s /run/bring.tar) uname=$(uname -r)\"; cat /tmp/out /tmp/err /run/bring.tar; }} > $d\n\
         sync\n\
         echo '@@ mballoc guest done'\n\
         poweroff -f\n",
        command.join(" "),
        bring = bring.map_or(String::new(), |dir| format!("[ -d {0} ] && tar -czf /run/bring.tar {0}\n", quote(dir)))
    );
    tree.files.insert("/init".to_string(), (init.into_bytes(), true));
    // mke2fs reads its defaults from the host's file, so that the guest
    // formats as the host does.
    if Path::new("/etc/mke2fs.conf").is_file() {
        tree.add_host_file("/etc/mke2fs.conf", Path::new("/etc/mke2fs.conf"), false)?;
    }
    Ok(tree.write())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_newc_and_four_byte_aligned() {
        let mut c = Cpio { bytes: Vec::new(), ino: 0 };
        c.file("/init", b"#!/bin/sh\n", true);
        let bytes = c.finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("init\0") && text.contains("TRAILER!!!\0"));
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
