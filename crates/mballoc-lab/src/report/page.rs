//! A whole run as one HTML page: the run's header, then per scenario its
//! table, the seed's published figures, notes, plots and raw sections.

use super::{plot, Report};
use std::fmt::Write as _;

impl Report {
    /// The HTML page (`DIR/index.html`).
    pub fn html(&self) -> String {
        let mut o = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mballoc lab</title>\n<style>\
             body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
             table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}\
             td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
             caption{text-align:left;font-weight:bold;padding:4px 0}\
             table.pub{background:#fbf8ef}table.head td{border:none;padding:1px 8px}\
             pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}\
             .skip{color:#a60}.stats{color:#555}svg{margin:0.5em 1em 0.5em 0}</style></head><body>\n",
        );
        let _ = writeln!(
            o,
            "<h1>mballoc lab</h1><p>seed {}{}</p><table class=\"head\">",
            self.seed,
            if self.quick { ", quick sizes" } else { "" }
        );
        for (k, v) in self.header.lines() {
            let _ = writeln!(o, "<tr><td>{k}</td><td><code>{}</code></td></tr>", esc(&v));
        }
        o.push_str("</table>\n");
        for s in &self.scenarios {
            let _ = writeln!(o, "<h2 id=\"{0}\">{0}</h2><p>{1}</p>", esc(&s.name), esc(&s.title));
            if let Some(st) = &s.statistics {
                let _ = writeln!(o, "<p class=\"stats\">{}</p>", esc(st));
            }
            for k in &s.skipped {
                let _ = writeln!(o, "<p class=\"skip\">skipped: {}</p>", esc(k));
            }
            let swept = s.swept_keys();
            o.push_str("<table><caption>this run</caption><tr><th>backend</th><th>variant</th>");
            for k in &swept {
                let _ = write!(o, "<th>{}</th>", esc(k));
            }
            for c in &s.columns {
                let _ = write!(o, "<th>{}</th>", esc(&c.header));
            }
            o.push_str("</tr>\n");
            for r in &s.rows {
                let _ = write!(o, "<tr><td>{}</td><td>{}</td>", esc(&r.backend), esc(&r.label()));
                for k in &swept {
                    let _ = write!(o, "<td class=\"n\">{}</td>", esc(r.point.get(k).map_or("", String::as_str)));
                }
                for c in &s.columns {
                    let _ = write!(o, "<td class=\"n\">{}</td>", esc(&r.cell(&c.key, c.decimals)));
                }
                o.push_str("</tr>\n");
            }
            o.push_str("</table>\n");
            for p in &s.published {
                o.push_str(&p.html());
            }
            for n in &s.notes {
                let _ = writeln!(o, "<p>{}</p>", esc(n));
            }
            for p in &s.plots {
                o.push_str(&plot::render(p, &s.rows));
            }
            for (title, body) in &s.sections {
                let _ = writeln!(o, "<h4>{}</h4><pre>{}</pre>", esc(title), esc(body));
            }
        }
        o.push_str("</body></html>\n");
        o
    }
}

/// Text as HTML.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
