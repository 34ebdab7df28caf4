//! A program's system calls, as `strace -f -y` printed them, turned into
//! the lab's operations ([`Trace`]), so that what a real program did can
//! run again through the engine's file layer and through ext4 side by side
//! (`mballoc lab fidelity` on a recording).
//!
//! Only what places blocks is kept: files opened for writing (created,
//! truncated or opened as they are), writes at their offsets (`write`,
//! `pwrite64`, `writev`, `pwritev`, `copy_file_range` and `sendfile` into
//! a file), `fallocate` (allocate, keep size, punch), `ftruncate`,
//! `fsync`/`fdatasync`, closes, unlinks, renames, links and directories,
//! each under the volume's mount point. `-y` prints every descriptor with
//! its path (`3</mnt/a>`), so names need no descriptor table; offsets do,
//! and follow each descriptor's writes and seeks. Reads, other file
//! systems and failed calls are passed over; calls that would change
//! blocks in ways the operations cannot say (writes through `mmap`,
//! `fallocate` modes other than the three, `rmdir`) are counted in
//! [`Converted::not_modelled`].

use crate::trace::Trace;
use crate::workload::{Interleave, Op, OpKind};
use std::collections::{BTreeMap, HashMap};

/// The operations, and what could not be expressed.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The program's operations on the volume, one stream in call order.
    pub trace: Trace,
    /// Calls on the volume the operations cannot express, by name.
    pub not_modelled: BTreeMap<String, u64>,
}

/// Convert `text` (strace `-f -y` output) of a program run inside
/// `mount_point` on a volume of `volume` bytes and `block_size`-byte
/// blocks.
pub fn convert(text: &str, mount_point: &str, volume: u64, block_size: u32) -> Converted {
    let mut c = Converter { root: mount_point.trim_end_matches('/').to_string(), ..Converter::default() };
    let mut unfinished: HashMap<u32, String> = HashMap::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.trim_start().split_once(char::is_whitespace) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let rest = rest.trim_start();
        // -f splits a call another task interrupted into two lines.
        let call = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            unfinished.insert(pid, head.trim_end().to_string());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some(head) = unfinished.remove(&pid) else { continue };
            let Some((_, after)) = tail.split_once("resumed>") else { continue };
            format!("{head}{after}")
        } else {
            rest.to_string()
        };
        c.call(&call);
    }
    let trace = Trace { volume, block_size, interleave: Interleave::InTurn, files: c.names, streams: vec![c.ops] };
    Converted { trace, not_modelled: c.not_modelled }
}

#[derive(Default)]
struct Converter {
    root: String,
    names: Vec<String>,
    slots: HashMap<String, u32>,
    ops: Vec<Op>,
    /// Offset of each open descriptor, by number and path.
    offsets: HashMap<(u32, String), u64>,
    /// Descriptors opened with `O_APPEND`.
    appending: std::collections::HashSet<(u32, String)>,
    /// Descriptors open for writing, per file.
    writers: HashMap<String, u32>,
    sizes: HashMap<String, u64>,
    not_modelled: BTreeMap<String, u64>,
    cwd: Option<String>,
}

impl Converter {
    fn call(&mut self, line: &str) {
        let Some(open) = line.find('(') else { return };
        let name = &line[..open];
        // strace pads short calls: `close(3</a>)       = 0`.
        let Some(eq) = line.rfind(" = ") else { return };
        let Some(close) = line[..eq].rfind(')') else { return };
        let ret = line[eq + 3..].split_whitespace().next().unwrap_or("");
        if ret.starts_with('-') || ret == "?" {
            return; // failed, or never returned
        }
        let args = split_args(&line[open + 1..close]);
        let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
        let n = |s: &str| s.parse::<u64>().ok();
        let ret_n = n(ret).unwrap_or(0);
        match name {
            "openat" | "open" | "creat" => {
                let Some((fd, path)) = decorated(ret) else { return };
                let Some(rel) = self.inside(&path) else { return };
                let flags =
                    if name == "creat" { "O_WRONLY|O_CREAT|O_TRUNC" } else { arg(if name == "open" { 1 } else { 2 }) };
                let writes = flags.contains("O_WRONLY") || flags.contains("O_RDWR");
                let key = (fd, rel.clone());
                self.offsets.insert(key.clone(), 0);
                if flags.contains("O_APPEND") {
                    self.appending.insert(key);
                }
                if !writes {
                    return;
                }
                let count = self.writers.entry(rel.clone()).or_insert(0);
                *count += 1;
                let first = *count == 1;
                let existed = self.sizes.contains_key(&rel);
                if flags.contains("O_TRUNC") || !existed {
                    self.sizes.insert(rel.clone(), 0);
                    self.op(OpKind::Create, &rel, 0, 0);
                } else if first {
                    self.op(OpKind::Open, &rel, 0, 0);
                }
            }
            "write" | "writev" => self.write_at_offset(arg(0), ret_n),
            "pwrite64" | "pwritev" | "pwritev2" => {
                // pwrite64(fd, buf, count, offset), pwritev(fd, iov, iovcnt, offset).
                if let (Some(rel), Some(off)) = (self.fd_file(arg(0)), n(arg(3))) {
                    self.write(&rel, off, ret_n);
                }
            }
            "copy_file_range" => match first_number(arg(3)) {
                Some(off) => {
                    if let Some(rel) = self.fd_file(arg(2)) {
                        self.write(&rel, off, ret_n);
                    }
                }
                None => self.write_at_offset(arg(2), ret_n),
            },
            "sendfile" | "sendfile64" => self.write_at_offset(arg(0), ret_n),
            "lseek" => {
                if let Some((fd, path)) = decorated(arg(0)) {
                    if let Some(rel) = self.inside(&path) {
                        self.offsets.insert((fd, rel), ret_n);
                    }
                }
            }
            "ftruncate" => {
                if let (Some(rel), Some(size)) = (self.fd_file(arg(0)), n(arg(1))) {
                    self.ensure_open(&rel);
                    self.sizes.insert(rel.clone(), size);
                    self.op(OpKind::Truncate, &rel, size, 0);
                }
            }
            "fallocate" => {
                let (Some(rel), Some(off), Some(len)) = (self.fd_file(arg(0)), n(arg(2)), n(arg(3))) else { return };
                let kind = match arg(1) {
                    "0" => OpKind::Fallocate,
                    "FALLOC_FL_KEEP_SIZE" => OpKind::FallocateKeepSize,
                    "FALLOC_FL_KEEP_SIZE|FALLOC_FL_PUNCH_HOLE" | "FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE" => {
                        OpKind::Punch
                    }
                    mode => return self.skip(&format!("fallocate {mode}")),
                };
                self.ensure_open(&rel);
                if kind == OpKind::Fallocate {
                    let s = self.sizes.entry(rel.clone()).or_insert(0);
                    *s = (*s).max(off + len);
                }
                self.op(kind, &rel, off, len);
            }
            "fsync" | "fdatasync" => {
                if let Some(rel) = self.fd_file(arg(0)) {
                    if self.writers.get(&rel).is_some_and(|&c| c > 0) {
                        self.op(OpKind::Fsync, &rel, 0, 0);
                    }
                }
            }
            "close" => {
                let Some((fd, path)) = decorated(arg(0)) else { return };
                let Some(rel) = self.inside(&path) else { return };
                self.offsets.remove(&(fd, rel.clone()));
                self.appending.remove(&(fd, rel.clone()));
                // Whether this descriptor wrote cannot be told from the
                // close; the last writer's close is ext4's last close.
                if let Some(c) = self.writers.get_mut(&rel) {
                    *c -= 1;
                    if *c == 0 {
                        self.writers.remove(&rel);
                        self.op(OpKind::Close, &rel, 0, 0);
                    }
                }
            }
            "unlink" | "unlinkat" => {
                if name == "unlinkat" && arg(2).contains("AT_REMOVEDIR") {
                    return self.skip("rmdir");
                }
                if let Some(rel) = self.path_arg(&args, name == "unlinkat") {
                    // Only names made as files here (not symlinks, not
                    // what the volume held before).
                    if self.sizes.remove(&rel).is_some() {
                        self.op(OpKind::Unlink, &rel, 0, 0);
                    }
                }
            }
            "rmdir" => self.skip("rmdir"),
            "symlink" | "symlinkat" => self.skip("symlink"),
            "mkdir" | "mkdirat" => {
                if let Some(rel) = self.path_arg(&args, name == "mkdirat") {
                    self.op(OpKind::Mkdir, &rel, 0, 0);
                }
            }
            "rename" | "renameat" | "renameat2" | "link" | "linkat" => {
                let at = name.ends_with("at") || name == "renameat2";
                let from = self.path_arg(&args, at);
                let to = self.path_arg(&args[if at { 2 } else { 1 }..], at);
                let (Some(from), Some(to)) = (from, to) else { return };
                let kind = if name.starts_with("rename") { OpKind::Rename } else { OpKind::Link };
                if kind == OpKind::Rename {
                    if let Some(s) = self.sizes.remove(&from) {
                        self.sizes.insert(to.clone(), s);
                    }
                    self.rekey(&from, &to);
                } else if let Some(&s) = self.sizes.get(&from) {
                    self.sizes.insert(to.clone(), s);
                }
                let target = self.slot(&to);
                self.op(kind, &from, 0, 0).to = target;
            }
            "chdir" => self.cwd = Some(unquote(arg(0))),
            "fchdir" => self.cwd = decorated(arg(0)).map(|(_, p)| p),
            "mmap"
                if arg(2).contains("PROT_WRITE") && arg(3).contains("MAP_SHARED") && self.fd_file(arg(4)).is_some() =>
            {
                self.skip("mmap shared writable");
            }
            _ => {}
        }
    }

    /// A write of `len` bytes at descriptor `fd_arg`'s offset.
    fn write_at_offset(&mut self, fd_arg: &str, len: u64) {
        let Some((fd, path)) = decorated(fd_arg) else { return };
        let Some(rel) = self.inside(&path) else { return };
        let key = (fd, rel.clone());
        let off = if self.appending.contains(&key) {
            self.sizes.get(&rel).copied().unwrap_or(0)
        } else {
            self.offsets.get(&key).copied().unwrap_or(0)
        };
        self.offsets.insert(key, off + len);
        self.write(&rel, off, len);
    }

    fn write(&mut self, rel: &str, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.ensure_open(rel);
        let s = self.sizes.entry(rel.to_string()).or_insert(0);
        *s = (*s).max(off + len);
        self.op(OpKind::Write, rel, off, len);
    }

    /// A file written through a descriptor this trace did not see opened
    /// for writing (inherited, or opened before): opened here, as it is.
    fn ensure_open(&mut self, rel: &str) {
        if self.writers.contains_key(rel) {
            return;
        }
        self.writers.insert(rel.to_string(), 1);
        let kind = if self.sizes.contains_key(rel) { OpKind::Open } else { OpKind::Create };
        self.sizes.entry(rel.to_string()).or_insert(0);
        self.op(kind, rel, 0, 0);
    }

    fn fd_file(&self, fd_arg: &str) -> Option<String> {
        decorated(fd_arg).and_then(|(_, p)| self.inside(&p))
    }

    /// The name under the mount point of an absolute `path`.
    fn inside(&self, path: &str) -> Option<String> {
        let rel = path.strip_prefix(&self.root)?.strip_prefix('/')?;
        (!rel.is_empty()).then(|| rel.trim_end_matches('/').to_string())
    }

    /// The path a call names: `args[0]` relative to the current directory,
    /// or (`at`) `args[1]` relative to the directory descriptor `args[0]`.
    fn path_arg(&self, args: &[String], at: bool) -> Option<String> {
        let (dir, name) = if at {
            (decorated(args.first()?).map(|(_, p)| p), unquote(args.get(1)?))
        } else {
            (None, unquote(args.first()?))
        };
        let full = if name.starts_with('/') {
            name
        } else {
            let base = dir.or_else(|| self.cwd.clone()).unwrap_or_else(|| self.root.clone());
            format!("{}/{name}", base.trim_end_matches('/'))
        };
        self.inside(&normalize(&full))
    }

    fn rekey(&mut self, from: &str, to: &str) {
        let moved: Vec<_> = self.offsets.keys().filter(|(_, p)| p == from).cloned().collect();
        for k in moved {
            if let Some(v) = self.offsets.remove(&k) {
                self.offsets.insert((k.0, to.to_string()), v);
            }
        }
        if let Some(c) = self.writers.remove(from) {
            self.writers.insert(to.to_string(), c);
        }
    }

    fn slot(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.slots.get(name) {
            return s;
        }
        self.names.push(name.to_string());
        let s = (self.names.len() - 1) as u32;
        self.slots.insert(name.to_string(), s);
        s
    }

    fn op(&mut self, kind: OpKind, name: &str, offset: u64, len: u64) -> &mut Op {
        let file = self.slot(name);
        self.ops.push(Op { kind, file, offset, len, to: 0 });
        self.ops.last_mut().expect("just pushed")
    }

    fn skip(&mut self, what: &str) {
        *self.not_modelled.entry(what.to_string()).or_insert(0) += 1;
    }
}

/// `3</mnt/a>` → `(3, "/mnt/a")` (also `AT_FDCWD</mnt>`, as fd 0).
fn decorated(s: &str) -> Option<(u32, String)> {
    let (fd, rest) = s.split_once('<')?;
    let path = rest.strip_suffix('>')?;
    let fd = if fd == "AT_FDCWD" { 0 } else { fd.parse().ok()? };
    Some((fd, path.to_string()))
}

/// The first number in `[123] => [456]` or `NULL`.
fn first_number(s: &str) -> Option<u64> {
    let digits: String = s.trim_start_matches('[').chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A quoted string argument, with strace's escapes undone.
fn unquote(s: &str) -> String {
    let s = s.trim().trim_end_matches("...");
    let inner = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(s);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(d @ '0'..='7') => {
                let mut v = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.clone().next().and_then(|x| x.to_digit(8)) {
                        Some(x) => {
                            v = v * 8 + x;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).unwrap_or('?'));
            }
            Some(x) => out.push(x),
            None => {}
        }
    }
    out
}

/// `a/./b/../c` → `a/c`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Split a call's arguments at top-level commas (not inside quotes,
/// brackets, braces or a descriptor's `<path>`).
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut depth, mut quoted, mut escaped, mut in_path) = (0i32, false, false, false);
    let mut prev = ' ';
    for ch in s.chars() {
        if quoted {
            cur.push(ch);
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                quoted = false;
            }
        } else if in_path {
            cur.push(ch);
            in_path = ch != '>';
        } else {
            match ch {
                '"' => quoted = true,
                '<' if prev.is_ascii_digit() || prev == 'D' => in_path = true,
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(cur.trim().to_string());
                    cur.clear();
                    prev = ch;
                    continue;
                }
                _ => {}
            }
            cur.push(ch);
        }
        prev = ch;
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"100  execve("/usr/bin/prog", ["prog"], 0x7ffc /* 4 vars */) = 0
100  openat(AT_FDCWD</mnt/x>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
100  close(3</etc/ld.so.cache>)        = 0
100  mkdirat(AT_FDCWD</mnt/x>, "d", 0755) = 0
100  openat(AT_FDCWD</mnt/x>, "d/a,b", O_WRONLY|O_CREAT|O_EXCL, 0644) = 3</mnt/x/d/a,b>
100  write(3</mnt/x/d/a,b>, "hello, world\n"..., 8192) = 8192
101  pwrite64(4</mnt/x/db>, "\0\0"..., 4096, 65536 <unfinished ...>
100  write(3</mnt/x/d/a,b>, "more", 100) = 100
101  <... pwrite64 resumed>) = 4096
100  lseek(3</mnt/x/d/a,b>, 0, SEEK_SET) = 0
100  write(3</mnt/x/d/a,b>, "x", 1) = 1
100  fallocate(3</mnt/x/d/a,b>, FALLOC_FL_KEEP_SIZE|FALLOC_FL_PUNCH_HOLE, 0, 4096) = 0
100  fallocate(3</mnt/x/d/a,b>, FALLOC_FL_ZERO_RANGE, 0, 4096) = 0
100  fsync(3</mnt/x/d/a,b>)           = 0
100  close(3</mnt/x/d/a,b>)           = 0
100  renameat2(AT_FDCWD</mnt/x>, "d/a,b", AT_FDCWD</mnt/x>, "d/c", RENAME_NOREPLACE) = 0
100  unlinkat(AT_FDCWD</mnt/x>, "d/gone", 0) = -1 ENOENT (No such file or directory)
100  unlinkat(AT_FDCWD</mnt/x>, "d/c", 0) = 0
100  write(1<pipe:[123]>, "done\n", 5) = 5
100  +++ exited with 0 +++
"#;

    #[test]
    fn a_programs_calls_become_operations() {
        let c = convert(SAMPLE, "/mnt/x", 1 << 30, 4096);
        let t = &c.trace;
        let ops: Vec<(OpKind, &str, u64, u64)> =
            t.streams[0].iter().map(|o| (o.kind, t.files[o.file as usize].as_str(), o.offset, o.len)).collect();
        assert_eq!(
            ops,
            vec![
                (OpKind::Mkdir, "d", 0, 0),
                (OpKind::Create, "d/a,b", 0, 0),
                (OpKind::Write, "d/a,b", 0, 8192),
                // An interrupted call counts where it returned.
                (OpKind::Write, "d/a,b", 8192, 100),
                (OpKind::Create, "db", 0, 0),
                (OpKind::Write, "db", 65536, 4096),
                (OpKind::Write, "d/a,b", 0, 1),
                (OpKind::Punch, "d/a,b", 0, 4096),
                (OpKind::Fsync, "d/a,b", 0, 0),
                (OpKind::Close, "d/a,b", 0, 0),
                (OpKind::Rename, "d/a,b", 0, 0),
                (OpKind::Unlink, "d/c", 0, 0),
            ]
        );
        let rename = &t.streams[0][10];
        assert_eq!(t.files[rename.to as usize], "d/c");
        assert_eq!(c.not_modelled.get("fallocate FALLOC_FL_ZERO_RANGE"), Some(&1));
        // The operations survive the trace format.
        let mut text = Vec::new();
        t.write(&mut text).unwrap();
        let back = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
        assert_eq!(back.streams[0].len(), 12);
    }

    #[test]
    fn arguments_split_at_top_level_commas_only() {
        assert_eq!(
            split_args(r#"3</a,b>, "x, \"y\"", [{iov_base="a,b", iov_len=3}], 2"#),
            vec!["3</a,b>", r#""x, \"y\"""#, r#"[{iov_base="a,b", iov_len=3}]"#, "2"]
        );
        assert_eq!(unquote(r#""a\"b\\c\101""#), "a\"b\\cA");
        assert_eq!(normalize("/m/./d/../e/"), "/m/e");
    }
}
