//! SVG charts (plotters, SVG backend only): line charts for latency CDFs, shares over time and
//! the breaker timeline.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One line: its name and points.
pub(crate) type Series = (String, Vec<(f64, f64)>);

/// How the x axis is drawn.
#[derive(Debug, Clone, Copy)]
pub(crate) enum XAxis {
    /// Linear.
    Linear,
    /// Logarithmic (the points' x must be > 0).
    Log,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
];

/// Draws `series` as lines into the SVG file `path`.
pub(crate) fn lines(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    x_axis: XAxis,
    y_range: Option<(f64, f64)>,
    series: &[Series],
) -> Result<()> {
    let tx = |x: f64| match x_axis {
        XAxis::Linear => x,
        XAxis::Log => x.max(1e-3).log10(),
    };
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(x, y)| (tx(x), y)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(*x), b.max(*x))
    });
    if pts.is_empty() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let (y0, y1) = y_range.unwrap_or_else(|| {
        let hi = pts.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        (0.0, if hi > 0.0 { hi * 1.05 } else { 1.0 })
    });
    let root = SVGBackend::new(path, (860, 440)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("chart {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let fmt_x = move |v: &f64| match x_axis {
        XAxis::Linear => format!("{v:.0}"),
        XAxis::Log => {
            let ms = 10f64.powf(*v);
            if ms < 1.0 {
                format!("{ms:.2}")
            } else if ms < 10.0 {
                format!("{ms:.1}")
            } else {
                format!("{ms:.0}")
            }
        }
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&fmt_x)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, p)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                p.iter().map(|&(x, y)| (tx(x), y)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The empirical CDF of `values` (ms), thinned to at most ~400 points.
pub(crate) fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let step = (n / 400).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    out.push((v[n - 1], 1.0));
    out
}
