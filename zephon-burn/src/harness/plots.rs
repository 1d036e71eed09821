//! The four PNG plots: stacked bars per batch, total time per batch, a pie
//! of the average shares, and bars of the data time by pipeline operator.
//!
//! Text is drawn with a font embedded in the crate (DejaVu Sans Mono, see
//! `assets/DejaVu-LICENSE.txt`), so plotting needs no system fonts.

use super::outputs::OutputFiles;
use super::pipeline::PipelineBreakdown;
use super::summary::Summary;
use super::timer::{BatchTiming, Phase};
use crate::error::{Error, Result};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use std::path::Path;
use std::sync::Once;

/// Width and height, in pixels, of every plot.
pub const PLOT_SIZE: (u32, u32) = (1000, 600);

const FONT: &str = "zephon-sans";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");

/// One color per phase, in [`Phase::ALL`] order.
const COLORS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
];

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is part of the crate and known to parse; a failure here
        // would only mean unlabelled plots, so it is not fatal.
        let _ = register_font(FONT, FontStyle::Normal, FONT_BYTES);
    });
}

fn plot_err(path: &Path) -> impl Fn(Box<dyn std::error::Error + '_>) -> Error + '_ {
    move |e| Error::output(path, e)
}

/// Writes `batch_time_breakdown.png`, `total_batch_time.png`,
/// `time_distribution_pie.png` and `pipeline_breakdown.png` to the paths in
/// `files`. Without a `pipeline` breakdown the fourth plot says so.
pub fn write_plots(
    timings: &[BatchTiming],
    summary: &Summary,
    pipeline: Option<&PipelineBreakdown>,
    files: &OutputFiles,
) -> Result<()> {
    register();
    breakdown(timings, &files.breakdown_png).map_err(plot_err(&files.breakdown_png))?;
    totals(timings, &files.total_png).map_err(plot_err(&files.total_png))?;
    pie(summary, &files.pie_png).map_err(plot_err(&files.pie_png))?;
    operators(pipeline, &files.pipeline_png).map_err(plot_err(&files.pipeline_png))?;
    Ok(())
}

type PlotResult = std::result::Result<(), Box<dyn std::error::Error + 'static>>;

fn breakdown(timings: &[BatchTiming], path: &Path) -> PlotResult {
    let root = BitMapBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = timings
        .iter()
        .map(|t| t.total * 1e3)
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    let n = timings.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption("Time per batch, by part", (FONT, 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .y_desc("ms")
        .label_style((FONT, 14))
        .draw()?;
    for (i, phase) in Phase::ALL.into_iter().enumerate() {
        let color = COLORS[i];
        let bars = timings.iter().enumerate().map(move |(x, t)| {
            let below: f64 = Phase::ALL[..i].iter().map(|p| t.get(*p)).sum::<f64>() * 1e3;
            let top = below + t.get(phase) * 1e3;
            let x = x as f64;
            Rectangle::new([(x + 0.1, below), (x + 0.9, top)], color.filled())
        });
        chart
            .draw_series(bars)?
            .label(phase.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn totals(timings: &[BatchTiming], path: &Path) -> PlotResult {
    let root = BitMapBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = timings
        .iter()
        .map(|t| t.total * 1e3)
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    let n = (timings.len().max(2) - 1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption("Total time per batch", (FONT, 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .y_desc("ms")
        .label_style((FONT, 14))
        .draw()?;
    chart.draw_series(LineSeries::new(
        timings
            .iter()
            .enumerate()
            .map(|(i, t)| (i as f64, t.total * 1e3)),
        COLORS[0].stroke_width(2),
    ))?;
    // Warm-up batches are marked, since the summary leaves them out.
    chart.draw_series(
        timings
            .iter()
            .enumerate()
            .filter(|(_, t)| t.warmup)
            .map(|(i, t)| Circle::new((i as f64, t.total * 1e3), 4, COLORS[3].filled())),
    )?;
    root.present()?;
    Ok(())
}

fn pie(summary: &Summary, path: &Path) -> PlotResult {
    let root = BitMapBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let title = root.titled("Average share of a step", (FONT, 24))?;
    let shares: Vec<f64> = Phase::ALL
        .iter()
        .map(|p| summary.get(*p).share_pct)
        .collect();
    // A pie of nothing (no measured batch) would divide by zero.
    let sizes = if shares.iter().sum::<f64>() > 0.0 {
        shares
    } else {
        vec![1.0; 4]
    };
    let labels: Vec<String> = Phase::ALL.iter().map(|p| p.name().to_string()).collect();
    let (w, h) = title.dim_in_pixel();
    let center = ((w / 2) as i32, (h / 2) as i32);
    let radius = f64::from(h.min(w)) * 0.35;
    let mut pie = Pie::new(&center, &radius, &sizes, &COLORS, &labels);
    pie.label_style((FONT, 18).into_font().color(&BLACK));
    pie.percentages((FONT, 16).into_font().color(&WHITE));
    title.draw(&pie)?;
    root.present()?;
    Ok(())
}

fn operators(pipeline: Option<&PipelineBreakdown>, path: &Path) -> PlotResult {
    let root = BitMapBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    // Operators first, then fetch's opening and reading, drawn lighter since
    // they are parts of fetch's bar rather than extra to it.
    let mut bars: Vec<(String, f64, bool)> = Vec::new();
    let data_ms = pipeline.map_or(0.0, |p| p.data_mean_ms);
    if let Some(p) = pipeline {
        bars.extend(
            p.operators
                .iter()
                .map(|o| (format!("{}@{}", o.name, o.position), o.share, false)),
        );
        if let Some(f) = &p.fetch {
            bars.push(("fetch open".into(), f.open_share, true));
            bars.push(("fetch read".into(), f.read_share, true));
        }
    }
    let caption = match pipeline {
        Some(p) => format!(
            "Data time ({:.1}% of the step) by pipeline operator",
            100.0 * p.data_share_of_step
        ),
        None => "Data time by pipeline operator (no per-operator tracking)".into(),
    };
    let n = bars.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT, 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..110.0)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let label = move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&label)
        .y_desc("% of the pipeline's busy time")
        .label_style((FONT, 14))
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, share, part))| {
        let x = i as f64;
        let color = if *part {
            COLORS[0].mix(0.4)
        } else {
            COLORS[0].mix(1.0)
        };
        Rectangle::new([(x - 0.35, 0.0), (x + 0.35, 100.0 * share)], color.filled())
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, share, _))| {
        Text::new(
            format!("{:.1}% ({:.3} ms)", 100.0 * share, share * data_ms),
            (i as f64 - 0.3, 100.0 * share + 4.0),
            (FONT, 14),
        )
    }))?;
    root.present()?;
    Ok(())
}
