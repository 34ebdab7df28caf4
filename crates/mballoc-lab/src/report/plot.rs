//! Plots as SVG, drawn with plotters: lines (a metric against a number,
//! log axes where the values span decades), bars (one per row, the
//! repeats' range as a whisker), grouped bars (a metric against a swept
//! category: a profile, a table) and free-space histograms. Legends sit
//! in a panel of their own beside the plot, so fifty series stay
//! readable; colours come from a 99-colour palette and markers cycle
//! through three shapes.

use super::page::esc;
use super::{cell, LinePlot, Plot, Row};
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::fmt::Write as _;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

const FONT: &str = "sans-serif";
const LEGEND_W: u32 = 330;
const ROW_H: u32 = 15;

/// The plot as an SVG element (empty when no row has its values).
pub(super) fn render(p: &Plot, rows: &[Row]) -> String {
    let svg = match p {
        Plot::Lines(l) => lines(l, rows),
        Plot::Bars { title, y, y_label } => bars(title, rows, y, y_label),
        Plot::Grouped { title, x, y, y_label } => grouped(title, rows, x, y, y_label),
        Plot::FreeHistograms { title } => return histograms(title, rows),
    };
    match svg {
        Ok(s) => s,
        Err(e) => format!("<p class=\"skip\">plot {:?} not drawn: {}</p>\n", plot_title(p), esc(&e.to_string())),
    }
}

fn plot_title(p: &Plot) -> &str {
    match p {
        Plot::Lines(l) => &l.title,
        Plot::Bars { title, .. } | Plot::Grouped { title, .. } | Plot::FreeHistograms { title } => title,
    }
}

fn colour(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

/// Draw `draw` on an SVG of `size` and return its text.
fn svg(size: (u32, u32), draw: impl FnOnce(&Area<'_>) -> Drawn) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    out.push('\n');
    Ok(out)
}

/// The legend panel: a sample of each series' line and marker, its name.
fn legend(area: &Area<'_>, names: &[String]) -> Drawn {
    for (i, name) in names.iter().enumerate() {
        let y = 30 + ROW_H as i32 * i as i32;
        let c = colour(i);
        area.draw(&PathElement::new(vec![(4, y), (24, y)], c.stroke_width(2)))?;
        marker(area, i, (14, y))?;
        area.draw(&Text::new(name.clone(), (30, y - 6), (FONT, 11).into_font()))?;
    }
    Ok(())
}

fn marker(area: &Area<'_>, i: usize, at: (i32, i32)) -> Drawn {
    let c = colour(i).filled();
    match (i / 10) % 3 {
        0 => area.draw(&Circle::new(at, 3, c))?,
        1 => area.draw(&TriangleMarker::new(at, 4, c))?,
        _ => area.draw(&Cross::new(at, 3, colour(i).stroke_width(2)))?,
    }
    Ok(())
}

/// Series of a line plot: one per backend, variant, setting in force,
/// swept setting but `x`, and value of each `split_by` metric.
pub(super) fn series(plot: &LinePlot, rows: &[Row]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = vec![];
    let wanted = |r: &Row| plot.only.iter().all(|(k, v)| r.metrics.get(k).and_then(Value::as_str) == Some(v.as_str()));
    for r in rows.iter().filter(|r| wanted(r)) {
        let (Some(xv), Some(yv)) = (r.value(&plot.x), r.num(&plot.y)) else { continue };
        let mut name = r.series_name(&plot.x);
        for k in &plot.split_by {
            if let Some(v) = r.metrics.get(k) {
                let _ = write!(name, ", {k}={}", cell(Some(v), 0));
            }
        }
        match out.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((xv, yv)),
            None => out.push((name, vec![(xv, yv)])),
        }
    }
    for s in &mut out {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn lines(plot: &LinePlot, rows: &[Row]) -> Result<String, Box<dyn std::error::Error>> {
    let series = series(plot, rows);
    if series.is_empty() {
        return Ok(String::new());
    }
    let pts = || series.iter().flat_map(|s| s.1.iter().copied());
    let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let log_x = plot.log_x && x0 > 0.0 && x1 / x0 >= 4.0;
    let log_y = y0 > 0.0 && y1 / y0 > 100.0;
    let xr = pad(x0, x1, log_x);
    let yr = if log_y { (y0 / 1.3, y1 * 1.3) } else { (0f64.min(y0), nice_top(y1)) };
    let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let h = 360.max(40 + ROW_H * names.len() as u32);
    let x_desc = format!("{}{}", plot.x_label, if log_x { " (log scale)" } else { "" });
    let y_desc = format!("{}{}", plot.y_label, if log_y { " (log scale)" } else { "" });
    // On a log axis, ticks at the values run (sweeps and worker counts
    // have few), or the axis's own where there are many.
    let mut ticks: Vec<f64> = pts().map(|p| p.0).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let ticks = (ticks.len() <= 12).then_some(ticks);
    svg((760 + LEGEND_W, h), |root| {
        let (chart, side) = root.split_horizontally(760);
        let t = &plot.title;
        let s = &series;
        let (xd, yd) = (x_desc.as_str(), y_desc.as_str());
        let (xs, ys) = (xr.0..xr.1, yr.0..yr.1);
        match (log_x, log_y, ticks) {
            // A linear axis's own ticks are round numbers already.
            (false, false, _) => line_chart(&chart, t, xs, ys, s, xd, yd)?,
            (true, false, None) => line_chart(&chart, t, xs.log_scale(), ys, s, xd, yd)?,
            (true, false, Some(k)) => line_chart(&chart, t, xs.log_scale().with_key_points(k), ys, s, xd, yd)?,
            (false, true, _) => line_chart(&chart, t, xs, ys.log_scale(), s, xd, yd)?,
            (true, true, None) => line_chart(&chart, t, xs.log_scale(), ys.log_scale(), s, xd, yd)?,
            (true, true, Some(k)) => {
                line_chart(&chart, t, xs.log_scale().with_key_points(k), ys.log_scale(), s, xd, yd)?
            }
        }
        legend(&side, &names)
    })
}

/// An x range with room around the points (a single point gets some).
fn pad(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if log {
        (lo / 1.15, hi * 1.15)
    } else if hi > lo {
        let m = (hi - lo) * 0.04;
        (lo - m, hi + m)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

fn line_chart<X, Y>(
    area: &Area<'_>,
    title: &str,
    x: X,
    y: Y,
    series: &[(String, Vec<(f64, f64)>)],
    x_desc: &str,
    y_desc: &str,
) -> Drawn
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut c = ChartBuilder::on(area)
        .caption(title, (FONT, 14))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?;
    c.configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, (_, pts)) in series.iter().enumerate() {
        let col = colour(i);
        c.draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))?;
        match (i / 10) % 3 {
            0 => {
                c.draw_series(pts.iter().map(|p| Circle::new(*p, 3, col.filled())))?;
            }
            1 => {
                c.draw_series(pts.iter().map(|p| TriangleMarker::new(*p, 4, col.filled())))?;
            }
            _ => {
                c.draw_series(pts.iter().map(|p| Cross::new(*p, 3, col.stroke_width(2))))?;
            }
        }
    }
    Ok(())
}

/// One horizontal bar per row with metric `y`, the first row on top, the
/// repeats' min–max as a whisker.
fn bars(title: &str, rows: &[Row], y: &str, y_label: &str) -> Result<String, Box<dyn std::error::Error>> {
    type Bar = (String, f64, Option<(f64, f64)>);
    let bars: Vec<Bar> = rows.iter().filter_map(|r| Some((r.series_name(""), r.num(y)?, r.range(y)))).collect();
    if bars.is_empty() {
        return Ok(String::new());
    }
    let n = bars.len();
    let top = nice_top(bars.iter().map(|b| b.2.map_or(b.1, |r| r.1.max(b.1))).fold(0.0, f64::max));
    let label_w = (bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(10) as u32 * 6 + 12).clamp(120, 520);
    let h = 70 + 20 * n as u32;
    svg((label_w + 560, h), |root| {
        let mut c = ChartBuilder::on(root)
            .caption(title, (FONT, 14))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(label_w)
            .build_cartesian_2d(0f64..top, -0.5f64..(n as f64 - 0.5))?;
        let name_at = |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() > 0.01 || i < 0.0 || i as usize >= n {
                return String::new();
            }
            bars[n - 1 - i as usize].0.clone()
        };
        c.configure_mesh()
            .x_desc(y_label)
            .x_label_formatter(&|v| short(*v))
            .y_labels(n)
            .y_label_formatter(&name_at)
            .disable_y_mesh()
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (i, (_, v, range)) in bars.iter().enumerate() {
            let at = (n - 1 - i) as f64;
            c.draw_series(std::iter::once(Rectangle::new([(0.0, at - 0.38), (*v, at + 0.38)], colour(i).filled())))?;
            if let Some((lo, hi)) = range {
                c.draw_series(std::iter::once(PathElement::new(vec![(*lo, at), (*hi, at)], BLACK.stroke_width(2))))?;
            }
            let end = range.map_or(*v, |r| r.1.max(*v));
            c.draw_series(std::iter::once(Text::new(short(*v), (end, at + 0.15), (FONT, 11).into_font())))?;
        }
        Ok(())
    })
}

/// Metric `y` against a swept category `x`: one group of bars per value
/// of `x`, one bar per series (backend, variant, settings) in it.
fn grouped(title: &str, rows: &[Row], x: &str, y: &str, y_label: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut cats: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut bars: Vec<(usize, usize, f64)> = Vec::new();
    for r in rows {
        let (Some(cat), Some(v)) = (r.point.get(x), r.num(y)) else { continue };
        let ci = cats.iter().position(|c| c == cat).unwrap_or_else(|| {
            cats.push(cat.clone());
            cats.len() - 1
        });
        let name = r.series_name(x);
        let si = names.iter().position(|s| *s == name).unwrap_or_else(|| {
            names.push(name);
            names.len() - 1
        });
        bars.push((ci, si, v));
    }
    if bars.is_empty() {
        return Ok(String::new());
    }
    let top = nice_top(bars.iter().map(|b| b.2).fold(0.0, f64::max));
    let (nc, ns) = (cats.len(), names.len());
    let h = 360.max(40 + ROW_H * ns as u32);
    svg((760 + LEGEND_W, h), |root| {
        let (chart, side) = root.split_horizontally(760);
        let mut c = ChartBuilder::on(&chart)
            .caption(title, (FONT, 14))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(nc as f64 - 0.5), 0f64..top)?;
        let cat_at = |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() > 0.01 || i < 0.0 || i as usize >= nc {
                return String::new();
            }
            cats[i as usize].clone()
        };
        c.configure_mesh()
            .x_desc(format!("{x} (swept)"))
            .y_desc(y_label)
            .x_labels(nc)
            .x_label_formatter(&cat_at)
            .y_label_formatter(&|v| short(*v))
            .disable_x_mesh()
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let width = 0.8 / ns as f64;
        for &(ci, si, v) in &bars {
            let x0 = ci as f64 - 0.4 + width * si as f64;
            c.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], colour(si).filled())))?;
        }
        legend(&side, &names)
    })
}

/// e2freefrag's bucket labels for 4 KiB blocks start at 4K; the label of
/// bucket `i` is its lower bound.
fn bucket_label(i: usize, block_size: u64) -> String {
    if i == 0 {
        return "0".into();
    }
    let bytes = block_size << (i - 1);
    match bytes {
        b if b >= 1 << 30 => format!("{}G", b >> 30),
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

/// One histogram per row, all on the same buckets (the union of every
/// row's non-empty ones) and the same y scale, so bars compare across
/// rows.
fn histograms(title: &str, rows: &[Row]) -> String {
    let hists: Vec<(&Row, Vec<f64>)> = rows
        .iter()
        .filter_map(|r| match r.metrics.get("free_hist_blocks") {
            Some(Value::Array(h)) => {
                let blocks: Vec<f64> = h.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect();
                let total: f64 = blocks.iter().sum();
                Some((r, blocks.iter().map(|b| if total > 0.0 { 100.0 * b / total } else { 0.0 }).collect()))
            }
            _ => None,
        })
        .collect();
    if hists.is_empty() {
        return String::new();
    }
    let nz = |i: usize| hists.iter().any(|(_, h)| h.get(i).is_some_and(|v| *v > 0.0));
    let len = hists.iter().map(|(_, h)| h.len()).max().unwrap_or(0);
    let lo = (0..len).find(|&i| nz(i)).unwrap_or(0);
    let hi = (0..len).rev().find(|&i| nz(i)).unwrap_or(lo);
    let top = hists.iter().flat_map(|(_, h)| h.iter().copied()).fold(0.0, f64::max).max(1.0);
    let top = (top / 25.0).ceil() * 25.0;
    let mut o = format!("<h4>{}</h4><div>", esc(title));
    for (r, pct) in &hists {
        let bs = r.num("block_size").unwrap_or(4096.0) as u64;
        let drawn = svg((360, 230), |root| {
            let mut c = ChartBuilder::on(root)
                .caption(format!("{} {}", r.backend, r.label()), (FONT, 11))
                .margin(6)
                .x_label_area_size(44)
                .y_label_area_size(44)
                .build_cartesian_2d(lo as f64 - 0.5..hi as f64 + 0.5, 0f64..top)?;
            let label = |v: &f64| {
                let i = v.round();
                if (v - i).abs() > 0.01 || i < 0.0 {
                    String::new()
                } else {
                    bucket_label(i as usize, bs)
                }
            };
            c.configure_mesh()
                .x_desc("free extent size (at least)")
                .y_desc("% of free blocks")
                .x_labels(hi - lo + 1)
                .x_label_formatter(&label)
                .x_label_style((FONT, 9).into_font())
                .disable_x_mesh()
                .light_line_style(WHITE.mix(0.0))
                .draw()?;
            c.draw_series((lo..=hi).map(|i| {
                let f = pct.get(i).copied().unwrap_or(0.0);
                Rectangle::new([(i as f64 - 0.42, 0.0), (i as f64 + 0.42, f)], colour(0).filled())
            }))?;
            Ok(())
        });
        match drawn {
            Ok(s) => o.push_str(&s),
            Err(e) => {
                let _ = write!(o, "<p class=\"skip\">histogram not drawn: {}</p>", esc(&e.to_string()));
            }
        }
    }
    o.push_str("</div>\n");
    o
}

/// Four times the smallest round step (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
/// times a power of ten) whose four ticks reach `v`: an axis whose ticks
/// are round numbers.
fn nice_top(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let raw = v / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    step * 4.0
}

fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.1}G", v / 1e9),
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e4 => format!("{:.0}k", v / 1e3),
        a if a >= 1e3 && v.fract() != 0.0 => format!("{:.1}k", v / 1e3),
        a if a >= 10.0 || v.fract() == 0.0 => format!("{v:.0}"),
        _ => format!("{v:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the SVG has a text element reading exactly `t`.
    fn has_text(svg: &str, t: &str) -> usize {
        svg.matches(&format!(">\n{}\n</text>", esc(t))).count()
    }

    #[test]
    fn histograms_share_one_range_and_have_a_y_axis() {
        let mut rows = vec![];
        for (b, h) in [("engine", vec![0u64, 0, 5, 5]), ("ext4", vec![0, 1, 0, 0, 0, 0, 9])] {
            let mut r = Row::new(b, "v");
            r.set("free_hist_blocks", h).set("block_size", 4096);
            rows.push(r);
        }
        let svg = histograms("t", &rows);
        // Both plots run from the 4K bucket to the 128K one.
        assert_eq!(has_text(&svg, "% of free blocks"), 2, "{svg}");
        assert_eq!(has_text(&svg, "128K"), 2, "{svg}");
        assert_eq!(has_text(&svg, "4K"), 2, "{svg}");
        assert_eq!(has_text(&svg, "2K"), 0, "{svg}");
    }

    #[test]
    fn series_split_by_everything_but_x() {
        let mut rows = vec![];
        for (mode, bs, v) in [("cache", 4, 1.0), ("cache", 64, 2.0), ("sync", 4, 3.0), ("sync", 64, 4.0)] {
            let mut r = Row::new("engine", "4 KiB folios");
            r.set("mode", mode).set("bs_kib", bs).set("mib_per_s", v);
            rows.push(r);
        }
        let Plot::Lines(p) = Plot::lines("t", "bs_kib", "KiB", "mib_per_s", "MiB/s").split_by("mode") else {
            unreachable!()
        };
        let s = series(&p, &rows);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].1, [(4.0, 3.0), (64.0, 4.0)]);
        let Plot::Lines(only) = Plot::lines("t", "bs_kib", "KiB", "mib_per_s", "MiB/s").only("mode", "sync") else {
            unreachable!()
        };
        assert_eq!(series(&only, &rows).len(), 1);
        let svg = lines(&p, &rows).unwrap();
        assert!(svg.contains("MiB/s") && svg.contains("(log scale)"), "{svg}");
    }

    #[test]
    fn fifty_series_get_a_legend_line_each() {
        let mut rows = vec![];
        for s in 0..50 {
            for x in [1u64, 2, 4, 8] {
                let mut r = Row::new("engine", &format!("variant {s}"));
                r.set("x", x).set("y", (s * x) as f64);
                rows.push(r);
            }
        }
        let Plot::Lines(p) = Plot::lines("t", "x", "x", "y", "y") else { unreachable!() };
        let svg = lines(&p, &rows).unwrap();
        for s in 0..50 {
            assert_eq!(has_text(&svg, &format!("engine variant {s}")), 1, "legend for {s}");
        }
    }

    #[test]
    fn categories_make_grouped_bars() {
        let mut rows = vec![];
        for (profile, v) in [("default", 3.0), ("kernel", 5.0)] {
            for b in ["engine", "mount"] {
                let mut r = Row::new(b, "v");
                r.point.insert("engine.profile".into(), profile.into());
                r.set("y", v);
                rows.push(r);
            }
        }
        let svg = grouped("t", &rows, "engine.profile", "y", "y").unwrap();
        assert!(has_text(&svg, "default") == 1 && has_text(&svg, "kernel") == 1, "{svg}");
        // The background and one bar per row.
        assert_eq!(svg.matches("<rect").count(), 1 + 4, "{svg}");
        assert_eq!(has_text(&bars("t", &rows, "y", "y").unwrap(), "engine v, profile=default"), 1);
    }
}
