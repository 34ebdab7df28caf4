//! `mballoc lab settings`: every key `--set`, `--sweep` and a workload's
//! tables take, with its default, unit and range.

use mballoc_lab::settings::{engine, kernel, WORKLOAD_KEYS};

/// Print the catalogue.
pub fn print() {
    println!("engine.KEY: every engine row; the profile is applied first, then the keys in order.");
    println!("  {:<30} {:<12} {:<12} {:<10} {:<26} what", "key", "default", "kernel", "unit", "range");
    for k in engine::keys() {
        let (own, kernel) = engine::defaults(k.key);
        println!("  {:<30} {:<12} {:<12} {:<10} {:<26} {}", k.key, own, kernel, k.unit, k.range, k.about);
    }
    println!();
    println!("ext4.KNOB: written to /sys/fs/ext4/DEV/KNOB after mounting, on every ext4 row.");
    println!("  {:<30} {:<20} {:<10} {:<10} {:<24} what", "knob", "kernel default", "here", "unit", "range");
    for k in kernel::EXT4_KNOBS {
        let here = kernel::live_value(k.name).map_or_else(|| "-".to_string(), |(_, v)| v);
        let range = if k.range.1 >= u64::from(u32::MAX) && k.range.1 != u64::from(u32::MAX) {
            format!("{} ..", k.range.0)
        } else {
            format!("{} ..= {}", k.range.0, k.range.1)
        };
        println!("  {:<30} {:<20} {:<10} {:<10} {:<24} {}", k.name, k.default, here, k.unit, range, k.about);
    }
    println!("  (\"here\": the value on a mounted ext4 volume of this machine, \"-\" when none is mounted)");
    println!();
    println!("ext4.KEY, xfs.KEY, btrfs.KEY: every row on that file system; checked by the kernel on a scratch volume before the run.");
    for (k, what) in kernel::KERNEL_KEYS {
        println!("  {k:<30} {what}");
    }
    println!();
    println!("workload.KEY: what every backend runs.");
    for (k, range, what) in WORKLOAD_KEYS {
        println!("  {k:<30} {range:<36} {what}");
    }
}
