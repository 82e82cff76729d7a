//! SVG figures: line charts with optional min-max bars, on linear or logarithmic axes (plotters' SVG backend,
//! drawn into a string; text is SVG `<text>` in the generic `sans-serif` family, so no font file is needed
//! or referenced).
//!
//! A [`Chart`] is data: series of points (x, median y, and the min and max over the runs when there are
//! several) and the sides that could not be measured, which the figure lists under the plot ("engine, tree
//! copy: not yet measured on the engine") instead of leaving them out silently. [`svg`] draws it;
//! [`inline`] turns the document into an element for an HTML page (no namespace URL).
//!
//! Axis ticks are chosen here, not by plotters ([`linear_ticks`], [`log_ticks`]): steps of 1, 2 or 5 times a
//! power of ten on a linear axis (whole numbers only on a thread-count axis); on a logarithmic axis the powers
//! of ten, or 1-2-5 within each decade, or every whole multiple when the range is narrower than a decade. Every
//! tick is labelled and has one grid line; there are no unlabelled minor lines.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Width and height of every figure, pixels.
pub const SIZE: (u32, u32) = (860, 480);

/// Line colours, in series order (distinct on white and for the common colour-vision deficiencies).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xbc, 0xbd, 0x22),
];

/// One point: the median and, when several runs were made, their min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// x.
    pub x: f64,
    /// The median y.
    pub y: f64,
    /// The smallest y over the runs.
    pub lo: Option<f64>,
    /// The largest y over the runs.
    pub hi: Option<f64>,
}

impl Point {
    /// A point without spread.
    pub fn at(x: f64, y: f64) -> Point {
        Point { x, y, lo: None, hi: None }
    }

    /// A point from a run summary (median, with min and max when there are several runs).
    pub fn of(x: f64, s: &vmspace_results::stats::Summary) -> Point {
        let spread = s.n > 1;
        Point { x, y: s.median, lo: spread.then_some(s.min), hi: spread.then_some(s.max) }
    }
}

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<Point>,
}

/// Where the legend goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Legend {
    /// Upper left corner.
    UpperLeft,
    /// Upper right corner.
    UpperRight,
    /// Lower right corner.
    LowerRight,
    /// A column right of the plot, outside the data: for figures with many lines, whose data fill every corner.
    /// Names are shortened there ([`short_label`]).
    Outside,
}

/// Width of the [`Legend::Outside`] column, pixels.
pub const LEGEND_WIDTH: u32 = 250;

/// A series name as the [`Legend::Outside`] column shows it: the engine's side names in their short forms
/// (`crate::terminal`'s), the contention rows' words shortened (`no scanner, no busy task`: `baseline`;
/// `1 scanner + 1 busy B=0`: `scanner + busy B=0`).
pub fn short_label(name: &str) -> String {
    // `side: its own label`: the label's repetition of the side (`engine per-vma ...`) and of the figure's
    // proc file (`smaps, ...`) go.
    let mut s = match name.split_once(": ") {
        Some((side, label)) => {
            let mut l = label;
            if let Some(rest) = l.strip_prefix("engine ") {
                l = rest.split_once(' ').map_or(rest, |(_, r)| r);
            }
            for pf in ["smaps_rollup, ", "smaps, ", "maps, ", "query, "] {
                l = l.strip_prefix(pf).unwrap_or(l);
            }
            format!("{side}: {l}")
        }
        None => name.to_string(),
    };
    for (long, short) in crate::terminal::SHORT_NAMES {
        s = s.replace(long, short);
    }
    s.replace("no scanner, no busy task", "baseline")
        .replace("1 scanner + 1 busy", "scanner + busy")
        .replace("1 scanner", "scanner")
        .replace("1 busy", "busy")
}

/// The colour of series `i` of `n`: the palette's while it lasts, else `n` hues spread around the colour wheel
/// (alternately darker and lighter), so that no two series of a figure share a colour.
pub fn series_color(i: usize, n: usize) -> RGBAColor {
    if n <= PALETTE.len() {
        return PALETTE[i % PALETTE.len()].to_rgba();
    }
    let light = if i.is_multiple_of(2) { 0.38 } else { 0.55 };
    HSLColor(i as f64 / n as f64, 0.75, light).to_rgba()
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title, drawn above the plot.
    pub title: String,
    /// x axis description.
    pub x_desc: String,
    /// y axis description.
    pub y_desc: String,
    /// Logarithmic x axis.
    pub x_log: bool,
    /// Logarithmic y axis.
    pub y_log: bool,
    /// A fixed y range (e.g. 0..1 for a CDF); otherwise the data's, with margin.
    pub y_range: Option<(f64, f64)>,
    /// A fixed x range; otherwise the data's, with margin.
    pub x_range: Option<(f64, f64)>,
    /// Label only whole numbers on the x axis (thread counts).
    pub x_integer: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// Lines that could not be drawn, with why; listed under the plot.
    pub missing: Vec<String>,
    /// Legend position.
    pub legend: Legend,
}

impl Chart {
    /// An empty chart.
    pub fn new(title: &str, x_desc: &str, y_desc: &str) -> Chart {
        Chart {
            title: title.to_string(),
            x_desc: x_desc.to_string(),
            y_desc: y_desc.to_string(),
            x_log: false,
            y_log: false,
            y_range: None,
            x_range: None,
            x_integer: false,
            series: Vec::new(),
            missing: Vec::new(),
            legend: Legend::UpperRight,
        }
    }

    /// Whether any series has a point.
    pub fn has_data(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing a figure: {e}")
}

/// The data range over the usable values (positive ones on a log axis), widened so no point sits on an edge.
fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let usable: Vec<f64> = values.filter(|v| v.is_finite() && (!log || *v > 0.0)).collect();
    let lo = usable.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = usable.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.6, hi * 1.6)
    } else if lo >= 0.0 {
        // Rates and counts: from zero, with headroom above the highest point (or bar).
        (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 })
    } else {
        let pad = if hi > lo { (hi - lo) * 0.08 } else { hi.abs().max(1.0) * 0.1 };
        (lo - pad, hi + pad)
    }
}

/// Draws `chart` as an SVG document.
pub fn svg(chart: &Chart) -> anyhow::Result<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let notes_h = 8 + 18 * chart.missing.len() as u32;
        let (plot, notes) = root.split_vertically(SIZE.1 - notes_h);
        let (plot, legend) = if chart.legend == Legend::Outside && !chart.series.is_empty() {
            let (p, l) = plot.split_horizontally(SIZE.0 - LEGEND_WIDTH);
            (p, Some(l))
        } else {
            (plot, None)
        };
        let xs = chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.x));
        let (x0, x1) = chart.x_range.unwrap_or_else(|| range(xs, chart.x_log));
        let ys =
            chart.series.iter().flat_map(|s| s.points.iter().flat_map(|p| [Some(p.y), p.lo, p.hi]).flatten());
        let (y0, y1) = chart.y_range.unwrap_or_else(|| range(ys, chart.y_log));
        let xt = if chart.x_log { log_ticks(x0, x1) } else { linear_ticks(x0, x1, chart.x_integer) };
        let yt = if chart.y_log { log_ticks(y0, y1) } else { linear_ticks(y0, y1, false) };
        let lin = |a: f64, b: f64, t| Ticks::<RangedCoordf64> { inner: (a..b).into(), ticks: t };
        let log = |a: f64, b: f64, t| Ticks::<LogCoord<f64>> { inner: (a..b).log_scale().into(), ticks: t };
        match (chart.x_log, chart.y_log) {
            (true, true) => draw(&plot, chart, log(x0, x1, xt), log(y0, y1, yt))?,
            (true, false) => draw(&plot, chart, log(x0, x1, xt), lin(y0, y1, yt))?,
            (false, true) => draw(&plot, chart, lin(x0, x1, xt), log(y0, y1, yt))?,
            (false, false) => draw(&plot, chart, lin(x0, x1, xt), lin(y0, y1, yt))?,
        }
        if let Some(area) = legend {
            draw_legend(&area, chart)?;
        }
        for (i, m) in chart.missing.iter().enumerate() {
            notes
                .draw(&Text::new(
                    m.clone(),
                    (16, 4 + 18 * i as i32),
                    ("sans-serif", 14).into_font().color(&BLACK),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(buf)
}

/// An axis (linear or logarithmic, `inner`) whose ticks are `ticks`: plotters draws one grid line and one label
/// at each, and asks for no others.
struct Ticks<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticks<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Light (minor) lines are asked for separately: there are none.
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

fn draw<X, Y>(area: &DrawingArea<SVGBackend<'_>, Shift>, c: &Chart, x: X, y: Y) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64, FormatOption = DefaultFormatting>,
    Y: Ranged<ValueType = f64, FormatOption = DefaultFormatting>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let label = |v: &f64| tick(*v);
    chart
        .configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .x_label_formatter(&label)
        .y_label_formatter(&label)
        .light_line_style(TRANSPARENT)
        .max_light_lines(0)
        .bold_line_style(BLACK.mix(0.15))
        .axis_desc_style(("sans-serif", 14))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err)?;
    for (i, s) in c.series.iter().enumerate() {
        let color = series_color(i, c.series.len());
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.y)).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(err)?;
        let bars = s.points.iter().filter_map(|p| match (p.lo, p.hi) {
            (Some(lo), Some(hi)) => Some(ErrorBar::new_vertical(p.x, lo, p.y, hi, color.stroke_width(1), 8)),
            _ => None,
        });
        chart.draw_series(bars).map_err(err)?;
    }
    if !c.series.is_empty() && c.legend != Legend::Outside {
        chart
            .configure_series_labels()
            .position(match c.legend {
                Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
                Legend::UpperRight => SeriesLabelPosition::UpperRight,
                Legend::LowerRight | Legend::Outside => SeriesLabelPosition::LowerRight,
            })
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.5))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// The [`Legend::Outside`] column: one entry per series, its colour's line and its short name, from the top of
/// the plot down.
fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, c: &Chart) -> anyhow::Result<()> {
    let n = c.series.len();
    // Entries shrink to fit the column's height (the plot's, under the title).
    let step = ((area.dim_in_pixel().1 as i32 - 50) / n.max(1) as i32).clamp(12, 20);
    for (i, s) in c.series.iter().enumerate() {
        let color = series_color(i, n);
        let y = 44 + step * i as i32;
        area.draw(&PathElement::new(vec![(4, y), (24, y)], color.stroke_width(2))).map_err(err)?;
        area.draw(&Circle::new((14, y), 3, color.filled())).map_err(err)?;
        area.draw(&Text::new(
            short_label(&s.name),
            (30, y - 7),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// Ticks of a linear axis over `lo..=hi`: multiples of a step of 1, 2 or 5 times a power of ten, the smallest
/// such step giving at most 8 ticks (at least 1 when `integer`: thread counts).
pub fn linear_ticks(lo: f64, hi: f64, integer: bool) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return Vec::new();
    }
    let raw = (hi - lo) / 8.0;
    let mut step = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if step * m >= raw {
            step *= m;
            break;
        }
    }
    if integer {
        step = step.max(1.0).round();
    }
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    // Rounded to the step's precision, so that 0.1 * 3 is written 0.3.
    let digits = (-step.log10().floor()).max(0.0) as i32 + 1;
    let round = |v: f64| {
        let p = 10f64.powi(digits);
        (v * p).round() / p
    };
    (first..=last).map(|k| round(k as f64 * step)).collect()
}

/// Ticks of a logarithmic axis over `lo..=hi` (positive): the powers of ten when there are at least 4 of them,
/// else 1, 2 and 5 times each power of ten when that gives at least 3, else every whole multiple of each power
/// of ten (a range narrower than a decade).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi.is_finite()) || hi <= lo {
        return Vec::new();
    }
    let within = |mults: &[f64]| -> Vec<f64> {
        let mut out = Vec::new();
        let mut e = lo.log10().floor() as i32;
        while 10f64.powi(e) <= hi {
            for m in mults {
                // Exact decimal values (10^-3 * 5 is 0.005, not 0.005000000000000001).
                let v = if e >= 0 { m * 10f64.powi(e) } else { m / 10f64.powi(-e) };
                if v >= lo && v <= hi {
                    out.push(v);
                }
            }
            e += 1;
        }
        out
    };
    let decades = within(&[1.0]);
    if decades.len() >= 4 {
        return decades;
    }
    let one_two_five = within(&[1.0, 2.0, 5.0]);
    if one_two_five.len() >= 3 {
        return one_two_five;
    }
    within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
}

/// An axis tick: `0.004`, `0.25`, `3`, `12.5`, `40k`, `1.5M`.
pub fn tick(v: f64) -> String {
    fn trim(s: String) -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e9 {
        format!("{}G", trim(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 0.1 {
        trim(format!("{v:.2}"))
    } else {
        let digits = (-a.log10().floor()) as usize + 1;
        trim(format!("{v:.digits$}"))
    }
}

/// The SVG document as an element to put inside an HTML page: without the XML namespace attribute (HTML
/// needs none for inline SVG) and without any XML declaration.
pub fn inline(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    body.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_lines_get_distinct_colours_and_a_legend_outside_the_data() {
        let mut c = Chart::new("t", "x", "y");
        c.legend = Legend::Outside;
        for i in 0..14 {
            c.series.push(Series {
                name: format!("engine, readers under per-VMA locks: smaps, 1 scanner + 1 busy B={i}"),
                points: vec![Point::at(1.0, i as f64), Point::at(2.0, i as f64 + 1.0)],
            });
        }
        let doc = svg(&c).unwrap();
        let colours: std::collections::HashSet<String> =
            (0..14).map(|i| format!("{:?}", series_color(i, 14))).collect();
        assert_eq!(colours.len(), 14, "every series its own colour");
        // Every legend entry is a short name placed right of the plot area.
        for i in 0..14 {
            let label = format!(">\nengine per-VMA: scanner + busy B={i}\n");
            let at = doc.find(&label).unwrap_or_else(|| panic!("no legend entry {label}: {doc}"));
            let tag = &doc[doc[..at].rfind("<text").unwrap()..at];
            let x: f64 = tag.split("x=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            assert!(x >= f64::from(SIZE.0 - LEGEND_WIDTH), "entry {i} at x = {x}: {tag}");
        }
        assert_eq!(short_label("no scanner, no busy task"), "baseline");
        assert_eq!(
            short_label("engine, readers under mmap_lock: engine mmap-lock smaps, 1 scanner + 1 busy B=2"),
            "engine mmap_lock: scanner + busy B=2"
        );
    }

    fn chart(x_log: bool, y_log: bool) -> Chart {
        let mut c = Chart::new("t", "x", "y");
        c.x_log = x_log;
        c.y_log = y_log;
        c.series.push(Series {
            name: "kernel".into(),
            points: vec![Point { x: 1.0, y: 10.0, lo: Some(8.0), hi: Some(12.0) }, Point::at(100.0, 1000.0)],
        });
        c.missing.push("engine: not yet measured on the engine".into());
        c
    }

    #[test]
    fn every_axis_combination_draws() {
        for (xl, yl) in [(false, false), (true, false), (false, true), (true, true)] {
            let s = svg(&chart(xl, yl)).unwrap();
            assert!(s.starts_with("<svg"), "{}", &s[..40]);
            assert!(s.contains("kernel") && s.contains("not yet measured on the engine"));
            let i = inline(&s);
            assert!(!i.contains("http"), "{}", &i[..200]);
            assert!(i.trim_end().ends_with("</svg>"));
        }
        // No data at all still draws (empty axes and the missing lines).
        let mut c = chart(true, true);
        c.series.clear();
        assert!(!c.has_data());
        assert!(svg(&c).unwrap().contains("not yet measured"));
    }

    #[test]
    fn ticks() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(0.004), "0.004");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(3.0), "3");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(40_000.0), "40k");
        assert_eq!(tick(1_500_000.0), "1.5M");
        assert_eq!(tick(5000.0), "5k");
        assert_eq!(tick(1500.0), "1.5k");
        assert_eq!(tick(0.005), "0.005");
        // Linear: 1-2-5 steps, at most 8 ticks; whole numbers on an integer axis.
        assert_eq!(linear_ticks(0.0, 1.02, false), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(linear_ticks(0.5, 2.5, true), [1.0, 2.0]);
        assert_eq!(linear_ticks(0.0, 330_000.0, false).len(), 7);
        assert!(linear_ticks(1.0, 1.0, false).is_empty());
        // Logarithmic: decades over a wide range, 1-2-5 over a middle one, whole multiples in a narrow one.
        assert_eq!(log_ticks(0.0004, 250.0), [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]);
        assert_eq!(log_ticks(27.0, 1700.0), [50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(
            log_ticks(2600.0, 16_700.0),
            [3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0, 9000.0, 10_000.0]
        );
        assert!(log_ticks(0.0, 10.0).is_empty());
    }
}
