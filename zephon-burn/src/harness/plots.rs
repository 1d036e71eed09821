//! The three PNG plots: stacked bars per batch, total time per batch, and a
//! pie of the average shares.
//!
//! Text is drawn with a font embedded in the crate (DejaVu Sans Mono, see
//! `assets/DejaVu-LICENSE.txt`), so plotting needs no system fonts.

use super::outputs::OutputFiles;
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

/// Writes `batch_time_breakdown.png`, `total_batch_time.png` and
/// `time_distribution_pie.png` to the paths in `files`.
pub fn write_plots(timings: &[BatchTiming], summary: &Summary, files: &OutputFiles) -> Result<()> {
    register();
    breakdown(timings, &files.breakdown_png).map_err(plot_err(&files.breakdown_png))?;
    totals(timings, &files.total_png).map_err(plot_err(&files.total_png))?;
    pie(summary, &files.pie_png).map_err(plot_err(&files.pie_png))?;
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
