//! The seeds' own published figures, shown beside the lab's rows: each
//! scenario names the seed and the table it reproduces, with the machine
//! and configuration the seed measured on. The numbers are transcribed
//! from the seeds as published; nothing here is measured by the lab.
//!
//! The seeds: 000 is the 2025 ext4 scalability series (will-it-scale
//! fallocate2, seed 000's fio fragmentation job), 001 the 2023 CR1.5
//! series (fsmark on a fragmented volume), 002 the 2004 proposal of
//! extents, mballoc and delayed allocation (cycles per block), 003 the
//! 2019 ldiskfs talk on aged volumes (dd on a 50/50 fragmented OST), 004
//! the 2024 large-folio series (fio buffered writes).

use serde::Serialize;
use std::fmt::Write as _;

/// One published table.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    /// The seed and the table (`seed 000, cover letter: ...`).
    pub source: &'static str,
    /// The machine and configuration it was measured on.
    pub setup: &'static str,
    /// Column headers.
    pub header: &'static [&'static str],
    /// Rows, as published.
    pub rows: &'static [&'static [&'static str]],
}

impl Published {
    /// The table as indented text.
    pub fn text(&self) -> String {
        let mut o = format!("   published: {}\n   ({})\n", self.source, self.setup);
        let all: Vec<&[&str]> = std::iter::once(self.header).chain(self.rows.iter().copied()).collect();
        let cols = all.iter().map(|r| r.len()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|i| all.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
            .collect();
        for r in all {
            o.push_str("     ");
            for (i, c) in r.iter().enumerate() {
                if i == 0 {
                    let _ = write!(o, "{c:<w$}  ", w = widths[i]);
                } else {
                    let _ = write!(o, "{c:>w$}  ", w = widths[i]);
                }
            }
            o.truncate(o.trim_end().len());
            o.push('\n');
        }
        o
    }

    /// The table as HTML.
    pub fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let mut o = format!(
            "<table class=\"pub\"><caption>published: {} <br><small>{}</small></caption><tr>",
            esc(self.source),
            esc(self.setup)
        );
        for h in self.header {
            let _ = write!(o, "<th>{}</th>", esc(h));
        }
        o.push_str("</tr>\n");
        for r in self.rows {
            o.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                let class = if i == 0 { "" } else { " class=\"n\"" };
                let _ = write!(o, "<td{class}>{}</td>", esc(c));
            }
            o.push_str("</tr>\n");
        }
        o.push_str("</table>\n");
        o
    }
}

/// The published tables a scenario reproduces (none for the scenarios
/// that measure the engine alone).
pub fn for_scenario(name: &str) -> Vec<Published> {
    match name {
        "fallocate2" => vec![
            Published {
                source: "seed 000 (ext4 scalability, 2025), cover letter: will-it-scale fallocate2 ops/s per container, base kernel",
                setup: "one fallocate2 worker in each of N CPU-bound containers; ops/s of one container",
                header: &["containers", "1", "2", "4", "8", "16", "32", "64"],
                rows: &[&["ops/s per container", "295287", "70665", "33865", "19387", "10104", "5588", "3588"]],
            },
            Published {
                source: "seed 000 (ext4 scalability, 2025), performance table: fallocate2 ops/s, base vs patched",
                setup: "Kunpeng 920, 512 GB, 960 GB SSD (P80 = 80 containers); AMD 9654 x2, 1536 GB, 960 GB SSD (P96); P1 = one container",
                header: &["machine, mount", "many: base", "many: patched", "P1: base", "P1: patched"],
                rows: &[
                    &["Kunpeng P80, mb_optimize_scan=0", "2667", "20049 (+651%)", "314065", "316724 (+0.8%)"],
                    &["Kunpeng P80, mb_optimize_scan=1", "2643", "19342 (+631%)", "316344", "328324 (+3.7%)"],
                    &["AMD P96, mb_optimize_scan=0", "3450", "52125 (+1410%)", "205851", "215136 (+4.5%)"],
                    &["AMD P96, mb_optimize_scan=1", "3209", "50331 (+1468%)", "207373", "209431 (+0.9%)"],
                ],
            },
        ],
        "fio-falloc" => vec![Published {
            source: "seed 000 (ext4 scalability, 2025), fragmentation table: fio falloc job, base vs patched",
            setup: "200 GB ext4 on /dev/sda, mkfs -E lazy_itable_init=0,lazy_journal_init=0 -O orphan_file; fio 64 threads x 1 GiB, 4 KiB fallocate appends",
            header: &["metric", "base linear", "base opt_scan", "patched linear", "patched opt_scan"],
            rows: &[
                &["bw (MiB/s)", "217", "217", "5718", "5626"],
                &["avg free extent (KB)", "1943732", "1943732", "1316212", "1171208"],
                &["free extents", "71", "71", "105", "118"],
                &["avg extents per file", "261967", "261973", "588", "570"],
                &["avg size per extent (KB)", "4", "4", "1780", "1837"],
                &["e4defrag score", "100", "100", "2", "2"],
            ],
        }],
        "small-files-fragmented" => vec![Published {
            source: "seed 001 (CR1.5, 2023), Test 1: fsmark, ~40000 files of 64 KiB, 64 threads",
            setup: "100 GiB nvme, 64 KiB pages, nodelalloc, fragmented to an average free fragment of 4 MB; e = extents scanned, c = cr0/cr1/cr1.5/cr2/cr3 hits",
            header: &["block size", "unpatched", "patched (CR1.5)"],
            rows: &[
                &["64 KiB: files/s", "6866", "13527"],
                &["64 KiB: extents scanned", "8,188,644", "1,719,725"],
                &["64 KiB: hits cr0/cr1/cr1.5/cr2/cr3", "381/330/-/4779/35534", "381/280/33299/1000/6064"],
                &["4 KiB: files/s", "21618", "23528"],
                &["4 KiB: extents scanned", "8,149,272", "223,013"],
                &["4 KiB: hits cr0/cr1/cr1.5/cr2/cr3", "34/1380/-/5624/34710", "34/1341/40387/0/0"],
            ],
        }],
        "multiblock-cost" => vec![Published {
            source: "seed 002 (extents + mballoc + delalloc, 2004): cycles spent in the allocator, dd of one file",
            setup: "2-way Pentium III 1 GHz, 512 MB, SCSI disk (20 MB/s), bitmaps preloaded; before = ext3 block at a time, after = mballoc with delalloc",
            header: &["file size", "before: allocations", "before: cycles/block", "after: allocations", "after: cycles/block"],
            rows: &[
                &["5 KB", "2", "14078", "1", "24928"],
                &["600 KB", "151", "3026", "1", "446"],
                &["12445 KB", "3117", "3158", "1", "20"],
            ],
        }],
        "aged" => vec![
            Published {
                source: "seed 003 (ldiskfs on aged volumes, 2019): dd 1 GiB conv=fsync on the fragmented OST",
                setup: "ldiskfs OST fragmented 50 free / 50 used blocks (debugfs), 76–81% filled; mb_stats from dmesg",
                header: &["preallocation table", "MB/s", "reqs", "extents scanned", "breaks"],
                rows: &[
                    &["too large: 256 512 ... 16384 blocks", "95.5", "153", "2046", "10"],
                    &["built from mb_groups", "116", "243", "141", "0"],
                ],
            },
            Published {
                source: "seed 003 (ldiskfs on aged volumes, 2019): ~100 TB OST, same pattern",
                setup: "dd on the unfragmented device: 1.2 GB/s write, 1.0 GB/s read",
                header: &["setting", "write"],
                rows: &[
                    &["fragmented, defaults", "99.24% lower"],
                    &["skip c0 when > 50% fragmented", "unchanged"],
                    &["skip c0 and c1 when > 50% fragmented", "557 MB/s (55% of unfragmented)"],
                ],
            },
        ],
        "folio-write" => vec![Published {
            source: "seed 004 (ext4 large folios, 2024): fio buffered write, base vs base + large folios",
            setup: "Intel Xeon Gold 6240, 400 GB RAM, 200 GB ramdisk; O/S/W = overwrite/sync/writeback; cache = N N N, sync = ramdisk N Y N, writeback = ramdisk N N Y",
            header: &["mode", "bs", "base IOPS", "base MiB/s", "large folios IOPS", "large folios MiB/s"],
            rows: &[
                &["cache", "4K", "417k", "1631", "423k", "1655 (+2%)"],
                &["cache", "64K", "33.4k", "2088", "59.1k", "3690 (+77%)"],
                &["cache", "1M", "2143", "2143", "3901", "3901 (+82%)"],
                &["sync", "4K", "9984", "39", "9871", "39 (-1%)"],
                &["sync", "64K", "5936", "371", "6320", "395 (+6%)"],
                &["sync", "1M", "1050", "1050", "1656", "1657 (+58%)"],
                &["writeback", "4K", "365k", "1424", "372k", "1449 (+2%)"],
                &["writeback", "64K", "31.2k", "1950", "56.4k", "3528 (+81%)"],
                &["writeback", "1M", "1968", "1968", "3814", "3814 (+94%)"],
            ],
        }],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_table_is_rectangular_and_renders() {
        for s in crate::scenarios::ALL {
            for p in for_scenario(s.name) {
                for r in p.rows {
                    assert_eq!(r.len(), p.header.len(), "{}: {r:?}", s.name);
                }
                assert!(p.text().contains(p.rows[0][0]));
                assert!(p.html().contains("<table"));
            }
        }
        assert!(!for_scenario("fio-falloc").is_empty());
    }
}
