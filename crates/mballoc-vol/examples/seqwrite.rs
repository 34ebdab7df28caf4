//! Sequential write through the Rust API, the baseline the bindings are
//! measured against (scripts/bench-bindings.sh): format a volume file,
//! write TOTAL bytes in CHUNK-byte writes, fsync, unmount; print the
//! seconds from the first write to the end of the fsync.
//!
//!     cargo run --release -p mballoc-vol --example seqwrite -- PATH TOTAL CHUNK

use mballoc_vol::{FormatOptions, MountOptions, OpenOptions, Volume};
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, total, chunk] = &args[..] else {
        return Err("usage: seqwrite PATH TOTAL CHUNK".into());
    };
    let (total, chunk): (u64, usize) = (total.parse()?, chunk.parse()?);
    let path = std::path::Path::new(path);
    let _ = std::fs::remove_file(path);
    mballoc_vol::mkfs(path, Some(total * 2), &FormatOptions::default(), mballoc_vol::Overwrite::Refuse)?;
    let dev = mballoc_vol::FileDevice::open(path, mballoc_vol::OpenMode::ReadWrite)?;
    let vol = Volume::open(std::sync::Arc::new(dev), MountOptions::default())?;
    let buf: Vec<u8> = (0..chunk).map(|i| (i * 7 + 3) as u8).collect();
    let mut f = vol.file("/seq", OpenOptions::new().write(true).create(true))?;
    let t = std::time::Instant::now();
    let mut done = 0;
    while done < total {
        f.write_all(&buf)?;
        done += chunk as u64;
    }
    f.sync_all()?;
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    vol.unmount()?;
    println!("{secs:.4}");
    Ok(())
}
