//! SVG plots of benchmark results (plotters' SVG backend; text is emitted as SVG `<text>`).
//!
//! [`lookup_vs_n`] draws, for every structure, the median lookup time (read-side protection per lookup) against
//! the number of ranges, both axes logarithmic: the curve that shows how each structure's lookup cost grows.

use crate::tree::TreeResults;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The lookup workload's median ns per lookup, per structure name, by `n`.
pub fn lookup_series(results: &TreeResults, workload: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &results.set.reports {
        if r.parameters.get("workload").and_then(|v| v.as_str()) != Some(workload) {
            continue;
        }
        let (Some(name), Some(n), Some(s)) = (
            r.parameters.get("structure").and_then(|v| v.as_str()),
            r.parameters.get("n").and_then(serde_json::Value::as_u64),
            r.metric("ns_per_op"),
        ) else {
            continue;
        };
        series.entry(name.to_string()).or_default().push((n as f64, s.median));
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// Writes the lookup-time-against-n plot of `results` to `path` (SVG).
pub fn lookup_vs_n(results: &TreeResults, path: &Path) -> anyhow::Result<()> {
    let series = lookup_series(results, "lookup");
    let points = || series.values().flatten();
    let (Some(x_max), Some(y_max)) =
        (points().map(|p| p.0).reduce(f64::max), points().map(|p| p.1).reduce(f64::max))
    else {
        anyhow::bail!("no lookup results to plot");
    };
    let x_min = points().map(|p| p.0).reduce(f64::min).unwrap_or(1.0).max(1.0);
    let y_min = points().map(|p| p.1).reduce(f64::min).unwrap_or(1.0).max(0.1);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Lookup of the range containing a random mapped address (guard per lookup)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x_min / 1.5..x_max * 1.5).log_scale(), (y_min / 1.5..y_max * 1.5).log_scale())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("ranges in the map (n)")
        .y_desc("ns per lookup (median)")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
