//! PNG plots with plotters' bitmap backend. Text needs a TrueType font,
//! read at run time from the usual system places; without one the plots
//! are drawn without labels rather than not at all.

use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
];

/// Registers a font for "sans-serif" once; false if none was found.
fn fonts() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                // The registry keeps a 'static reference: leak it once.
                let b: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, b).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Ten distinct series colours: a plot of every system in both shapes
/// (eight series) gives no two the same.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn e<E: std::fmt::Debug>(x: E) -> String {
    format!("plot: {x:?}")
}

/// Where a line chart puts its legend.
pub use plotters::chart::SeriesLabelPosition as Legend;

/// An experiment's line chart of `series`, drawn at the path its files
/// get (see [`lines`]).
pub(crate) fn lines_later(
    title: &'static str,
    xdesc: &'static str,
    ydesc: &'static str,
    legend: Legend,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> crate::Plot {
    Box::new(move |p| lines(p, title, xdesc, ydesc, legend, &series))
}

/// A line chart of named series of (x, y) points.
pub fn lines(
    path: &Path,
    title: &str,
    xdesc: &str,
    ydesc: &str,
    legend: Legend,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let text = fonts();
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.1 };
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption(title, ("sans-serif", 22)).x_label_area_size(45).y_label_area_size(70);
    }
    let mut chart = b.build_cartesian_2d(x0..x1, 0f64..y1).map_err(e)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(xdesc).y_desc(ydesc);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(e)?;
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart.draw_series(p.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled()))).map_err(e)?;
        let s = chart.draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2))).map_err(e)?;
        if text {
            s.label(name.as_str()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        }
    }
    if text && !series.is_empty() {
        chart
            .configure_series_labels()
            .position(legend)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)
}

/// Bars with a label under each, and an optional reference value per bar
/// (drawn as a black tick, e.g. the paper's figure).
pub fn bars(path: &Path, title: &str, ydesc: &str, items: &[(String, f64, Option<f64>)]) -> Result<(), String> {
    let text = fonts();
    let n = items.len().max(1);
    let top = items.iter().flat_map(|i| [i.1, i.2.unwrap_or(0.0)]).fold(0f64, f64::max);
    let top = if top <= 0.0 { 1.0 } else { top * 1.15 };
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption(title, ("sans-serif", 22)).x_label_area_size(45).y_label_area_size(70);
    }
    let mut chart = b.build_cartesian_2d(0f64..n as f64, 0f64..top).map_err(e)?;
    let labels: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
    let fmt = move |x: &f64| {
        let i = x.floor() as usize;
        if (x - x.floor() - 0.5).abs() < 0.01 {
            labels.get(i).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh();
    if text {
        mesh.y_desc(ydesc).x_labels(2 * n + 1).x_label_formatter(&fmt);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(e)?;
    chart
        .draw_series(items.iter().enumerate().map(|(i, it)| {
            let c = COLORS[i % 2];
            Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, it.1)], c.filled())
        }))
        .map_err(e)?;
    chart
        .draw_series(items.iter().enumerate().filter_map(|(i, it)| {
            it.2.map(|r| PathElement::new(vec![(i as f64 + 0.1, r), (i as f64 + 0.9, r)], BLACK.stroke_width(3)))
        }))
        .map_err(e)?;
    root.present().map_err(e)
}
