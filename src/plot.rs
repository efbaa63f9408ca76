//! Pictures of fields and time series as PNG images (`plotters`' bitmap backend):
//! `sdflow plot`, and the dycore example's `--plot`.
//!
//! Text (titles, axis labels, the colour bar's scale) is drawn with a TrueType font read
//! at run time: `$SDFLOW_FONT`, else DejaVu Sans or Liberation Sans where Debian and most
//! Linux distributions put them. Without one the pictures are drawn without text, and
//! [`has_text`] says so.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

/// Why a picture could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlotError(pub String);

/// The environment variable naming a TrueType font file for the pictures' text.
pub const FONT_ENV: &str = "SDFLOW_FONT";

const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Whether pictures get text: a font was found (see the module documentation).
pub fn has_text() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let candidates = std::env::var(FONT_ENV)
            .ok()
            .into_iter()
            .chain(FONT_PATHS.iter().map(|p| p.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // Registered once per process, for its lifetime.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

fn err(path: &Path, e: impl std::fmt::Display) -> PlotError {
    PlotError(format!("{}: {e}", path.display()))
}

/// The smallest and largest finite value; `None` when there is none.
fn finite_range(values: &[f64]) -> Option<(f64, f64)> {
    values
        .iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, &v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// The most cells a heat map draws along one side (a picture of at most about 4 100
/// pixels a side: larger fields are an error, not a huge allocation).
pub const MAX_CELLS_PER_SIDE: usize = 4096;

/// A value axis over data from `lo` to `hi` (finite, `lo ≤ hi`), made safe for the
/// drawing library, whose tick computation needs a finite range of positive width (it
/// hangs on an infinite one and divides by zero on an empty one): values are drawn
/// multiplied by `scale` (10⁻²⁰ when their magnitude nears `f64`'s limit, so that the
/// range's width is finite, and a power of ten keeps the ticks round; else 1), over
/// `lo..hi` in those units, widened around a single value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axis {
    scale: f64,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn new(lo: f64, hi: f64) -> Axis {
        let scale = if lo.abs().max(hi.abs()) > 1e300 {
            1e-20
        } else {
            1.0
        };
        let (lo, hi) = (lo * scale, hi * scale);
        if hi > lo {
            return Axis { scale, lo, hi };
        }
        // One value: a range around it, at least ±1 and wide enough to be resolved.
        let d = (lo.abs() * 2f64.powi(-10)).max(1.0);
        Axis {
            scale,
            lo: lo - d,
            hi: lo + d,
        }
    }

    /// A value in the axis's units.
    fn at(&self, v: f64) -> f64 {
        v * self.scale
    }

    /// A value in the axis's units, from 0 (its start) to 1 (its end), clamped; NaN is 0.
    fn fraction(&self, v: f64) -> f64 {
        let t = (self.at(v) - self.lo) / (self.hi - self.lo);
        if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) }
    }

    /// The tick label of a position in the axis's units (0 for what is 0 but for
    /// rounding in the tick computation).
    fn label(&self, v: f64) -> String {
        if v.abs() < (self.hi - self.lo) * 1e-9 {
            return "0".into();
        }
        short_number(v / self.scale)
    }
}

/// A heat map of a 2-D field: `values[j * nx + i]` is the cell in column `i` and row
/// `j` (row 0 at the bottom), coloured on the viridis scale between the field's
/// smallest and largest finite values, with a colour bar. Cells that are not finite are
/// drawn white; a field of one value is drawn in the middle colour of the scale. Any
/// values draw (also NaN, infinities and magnitudes up to `f64::MAX`); an empty field or
/// one wider or taller than [`MAX_CELLS_PER_SIDE`] is an error.
pub fn heatmap(
    values: &[f64],
    nx: usize,
    ny: usize,
    title: &str,
    path: &Path,
) -> Result<(), PlotError> {
    if nx == 0 || ny == 0 {
        return Err(err(
            path,
            format!("the field is empty ({nx} x {ny} cells): there is nothing to draw"),
        ));
    }
    if values.len() != nx.saturating_mul(ny) {
        return Err(err(
            path,
            format!(
                "a {nx} x {ny} field needs {} values, got {}",
                nx.saturating_mul(ny),
                values.len()
            ),
        ));
    }
    if nx.max(ny) > MAX_CELLS_PER_SIDE {
        return Err(err(
            path,
            format!(
                "a {nx} x {ny} field is too large to draw: at most {MAX_CELLS_PER_SIDE} cells a side"
            ),
        ));
    }
    let (lo, hi) = finite_range(values).unwrap_or((0.0, 0.0));
    let axis = Axis::new(lo, hi);
    // Square cells, the drawing about 640 pixels on its longer side.
    let cell = (640 / nx.max(ny)).max(1) as u32;
    let (w, h) = (nx as u32 * cell, ny as u32 * cell);
    let text = has_text();
    let (margin_top, margin_left, bar) = if text { (40, 60, 140) } else { (10, 10, 50) };
    let size = (w + margin_left + bar + 20, h + margin_top + 50);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let (left, right) = root.split_horizontally(size.0 - bar);
    let mut chart = ChartBuilder::on(&left);
    chart.margin(10);
    if text {
        chart
            .caption(title, ("sans-serif", 18))
            .x_label_area_size(30)
            .y_label_area_size(margin_left - 10);
    }
    let mut chart = chart
        .build_cartesian_2d(0..nx as i64, 0..ny as i64)
        .map_err(|e| err(path, e))?;
    if text {
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("i")
            .y_desc("j")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| err(path, e))?;
    }
    // The colour map is given a fraction of the range: it cannot handle a range that is
    // empty or wider than the largest float (it panics there).
    let viridis = |t: f64| ViridisRGB::get_color_normalized(t, 0.0, 1.0);
    let colour = |v: f64| -> RGBColor {
        if v.is_finite() {
            viridis(axis.fraction(v))
        } else {
            WHITE
        }
    };
    chart
        .draw_series((0..ny).flat_map(|j| {
            (0..nx).map(move |i| {
                Rectangle::new(
                    [(i as i64, j as i64), (i as i64 + 1, j as i64 + 1)],
                    colour(values[j * nx + i]).filled(),
                )
            })
        }))
        .map_err(|e| err(path, e))?;
    // The colour bar: 100 steps from the smallest value to the largest.
    let mut scale = ChartBuilder::on(&right);
    scale
        .margin_top(if text { 40 } else { 10 })
        .margin_bottom(40);
    if text {
        scale.y_label_area_size(100);
    }
    let mut scale = scale
        .build_cartesian_2d(0..1i64, axis.lo..axis.hi)
        .map_err(|e| err(path, e))?;
    if text {
        scale
            .configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .label_style(("sans-serif", 11))
            .y_labels(6)
            .y_label_formatter(&|v| axis.label(*v))
            .draw()
            .map_err(|e| err(path, e))?;
    }
    let span = axis.hi - axis.lo;
    scale
        .draw_series((0..100).map(|k| {
            let a = axis.lo + span * k as f64 / 100.0;
            let b = axis.lo + span * (k + 1) as f64 / 100.0;
            Rectangle::new([(0, a), (1, b)], viridis(k as f64 / 100.0).filled())
        }))
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// Line plots of `series` (name, points) against a shared x axis; `log_y` plots the
/// absolute values on a logarithmic scale (for errors spanning decades; zeros are left
/// out). Points that are not finite are left out; any finite values draw (magnitudes up
/// to `f64::MAX` too).
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_y: bool,
    path: &Path,
) -> Result<(), PlotError> {
    let keep = |(x, y): (f64, f64)| -> Option<(f64, f64)> {
        let y = if log_y { y.abs() } else { y };
        (x.is_finite() && y.is_finite() && (!log_y || y > 0.0)).then_some((x, y))
    };
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter_map(keep)
        .collect();
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    let (x0, x1) = finite_range(&xs).unwrap_or((0.0, 1.0));
    let x_axis = Axis::new(x0, x1);
    let (y0, y1) = finite_range(&ys).unwrap_or(if log_y { (1e-16, 1.0) } else { (0.0, 1.0) });
    // A linear y axis as the x axis; a logarithmic one (positive values) a decade on
    // either side of a single value, and over at most 300 decades (the drawing library
    // loops for ever on a range whose ends' ratio overflows): smaller values are drawn at
    // its bottom.
    let y_axis = if log_y {
        let (lo, hi) = if y1 > y0 {
            (y0, y1)
        } else {
            (y0 / 10.0, (y0 * 10.0).min(f64::MAX))
        };
        Axis {
            scale: 1.0,
            lo: lo.max(hi * 1e-300).max(f64::MIN_POSITIVE),
            hi,
        }
    } else {
        Axis::new(y0, y1)
    };
    let text = has_text();
    let root = BitMapBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root);
    chart.margin(15);
    if text {
        chart
            .caption(title, ("sans-serif", 18))
            .x_label_area_size(40)
            .y_label_area_size(80);
    }
    let palette = [BLUE, RED, GREEN, MAGENTA, CYAN];
    let clean = |p: &[(f64, f64)]| -> Vec<(f64, f64)> {
        p.iter()
            .copied()
            .filter_map(keep)
            .map(|(x, y)| {
                let y = if log_y { y.max(y_axis.lo) } else { y };
                (x_axis.at(x), y_axis.at(y))
            })
            .collect()
    };
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart.map_err(|e| err(path, e))?;
            if text {
                chart
                    .configure_mesh()
                    .x_desc(x_label)
                    .y_desc(y_label)
                    .label_style(("sans-serif", 12))
                    .x_label_formatter(&|v| x_axis.label(*v))
                    .y_label_formatter(&|v| y_axis.label(*v))
                    .draw()
                    .map_err(|e| err(path, e))?;
            }
            for (k, (name, p)) in series.iter().enumerate() {
                let c = palette[k % palette.len()];
                let s = chart
                    .draw_series(LineSeries::new(clean(p), c.stroke_width(2)))
                    .map_err(|e| err(path, e))?;
                if text {
                    s.label(name.as_str()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                }
            }
            if text {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 12))
                    .draw()
                    .map_err(|e| err(path, e))?;
            }
        }};
    }
    let xr = x_axis.lo..x_axis.hi;
    if log_y {
        draw!(chart.build_cartesian_2d(xr, (y_axis.lo..y_axis.hi).log_scale()));
    } else {
        draw!(chart.build_cartesian_2d(xr, y_axis.lo..y_axis.hi));
    }
    root.present().map_err(|e| err(path, e))
}

/// The 2-D field a heat map draws from a row-major array of `shape`: the whole array
/// when it has two dimensions (`axis` `None`), else the slice at index `level` of
/// dimension `axis` of a 3-D one. Returns the values with `values[j * nx + i]` at
/// position `i` of the first remaining dimension and `j` of the second, and `(nx, ny)`.
/// The caller checks the rank, `axis` and `level`.
pub fn slice(
    values: &[f64],
    shape: &[usize],
    axis: Option<usize>,
    level: usize,
) -> (Vec<f64>, usize, usize) {
    let offset = |idx: &[usize]| -> usize {
        idx.iter()
            .zip(shape)
            .fold(0usize, |acc, (&i, &n)| acc * n + i)
    };
    let rest: Vec<usize> = (0..shape.len()).filter(|&d| Some(d) != axis).collect();
    let (nx, ny) = (shape[rest[0]], shape[rest[1]]);
    let mut grid = vec![0.0; nx * ny];
    let mut idx = vec![0usize; shape.len()];
    if let Some(a) = axis {
        idx[a] = level;
    }
    for i in 0..nx {
        for j in 0..ny {
            idx[rest[0]] = i;
            idx[rest[1]] = j;
            grid[j * nx + i] = values[offset(&idx)];
        }
    }
    (grid, nx, ny)
}

/// A tick label: up to four significant digits, in exponent form when very large or
/// small.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{Axis, heatmap, lines, short_number, slice};

    #[test]
    fn slices_take_the_right_elements() {
        // t[a, b, c] = 100 a + 10 b + c, shape [2, 3, 4].
        let shape = [2, 3, 4];
        let t: Vec<f64> = (0..24)
            .map(|k| (100 * (k / 12) + 10 * ((k / 4) % 3) + k % 4) as f64)
            .collect();
        // Dimension 0 at index 1: (b, c) across and up.
        let (g, nx, ny) = slice(&t, &shape, Some(0), 1);
        assert_eq!((nx, ny), (3, 4));
        assert_eq!(g[0], 100.0);
        assert_eq!(g[2], 120.0); // i = 2 (b), j = 0
        assert_eq!(g[3 * 3 + 1], 113.0); // i = 1, j = 3 (c)
        // The last dimension at index 2: (a, b).
        let (g, nx, ny) = slice(&t, &shape, Some(2), 2);
        assert_eq!((nx, ny), (2, 3));
        assert_eq!(g, [2.0, 102.0, 12.0, 112.0, 22.0, 122.0]);
        // A 2-D array whole.
        let (g, nx, ny) = slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], None, 0);
        assert_eq!((nx, ny), (2, 3));
        assert_eq!(g, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(3.000000000002e-15), "3.0e-15");
        assert_eq!(short_number(0.95), "0.95");
        assert_eq!(short_number(-5.0), "-5");
        assert_eq!(short_number(12.3456), "12.3456");
        assert_eq!(short_number(2.5e6), "2.5e6");
    }

    #[test]
    fn axes_are_finite_and_of_positive_width() {
        let max = f64::MAX;
        for (lo, hi) in [
            (0.0, 0.0),
            (2f64.powi(53), 2f64.powi(53)),
            (-max, max),
            (max, max),
            (-max, -max),
            (1e308, 1e308),
            (5e-324, 5e-324),
            (0.0, 5e-324),
            (-1.0, 3.0),
        ] {
            let a = Axis::new(lo, hi);
            assert!(
                a.lo.is_finite() && a.hi.is_finite() && (a.hi - a.lo).is_finite() && a.hi > a.lo,
                "{lo}..{hi}: {a:?}"
            );
            assert!(a.fraction(lo) >= 0.0 && a.fraction(hi) <= 1.0, "{lo}..{hi}");
        }
        // Ordinary ranges are kept as they are; a single value gets ±1 around it.
        assert_eq!(
            Axis::new(-1.0, 3.0),
            Axis {
                scale: 1.0,
                lo: -1.0,
                hi: 3.0
            }
        );
        assert_eq!(
            Axis::new(5.0, 5.0),
            Axis {
                scale: 1.0,
                lo: 4.0,
                hi: 6.0
            }
        );
        assert_eq!(Axis::new(-max, max).label(0.0), "0");
        assert_eq!(Axis::new(-max, max).label(1e288), "1.0e308");
    }

    /// Runs `f` on a thread and fails when it panics or takes longer than a minute (the
    /// drawing library's tick computation used to loop forever on infinite ranges).
    fn finishes(what: &str, f: impl FnOnce() -> Result<(), super::PlotError> + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r.map(|r| r.map_err(|e| e.to_string())));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => panic!("{what}: {e}"),
            Ok(Err(_)) => panic!("{what}: panicked"),
            Err(_) => panic!("{what}: did not finish in a minute"),
        }
    }

    #[test]
    fn extreme_values_draw_without_panic_or_hang() {
        let dir = std::env::temp_dir().join(format!("sdflow-plot-extreme-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (max, nan, inf) = (f64::MAX, f64::NAN, f64::INFINITY);
        let fields: [(&str, Vec<f64>); 11] = [
            ("constant 2^53", vec![2f64.powi(53); 4]),
            ("constant 1e300", vec![1e300; 4]),
            ("range overflows", vec![1e308, -1e308, 0.0, 1.0]),
            ("both extremes", vec![max, -max, max, -max]),
            ("all NaN", vec![nan; 4]),
            ("infinities", vec![inf, -inf, 1.0, nan]),
            ("only infinities", vec![inf, -inf, inf, -inf]),
            ("subnormal", vec![5e-324, 0.0, -5e-324, 1e-310]),
            ("huge and tiny", vec![max, 5e-324, -1.0, 0.0]),
            ("negative zero", vec![-0.0, 0.0, -0.0, 0.0]),
            ("ordinary", vec![1.0, 2.0, 3.0, 4.0]),
        ];
        for (k, (name, v)) in fields.into_iter().enumerate() {
            let p = dir.join(format!("h{k}.png"));
            let w = v.clone();
            finishes(&format!("heat map, {name}"), move || {
                heatmap(&w, 2, 2, "f", &p)
            });
            let p = dir.join(format!("l{k}.png"));
            let series = vec![(
                "f".to_string(),
                v.iter()
                    .copied()
                    .enumerate()
                    .map(|(i, y)| (i as f64, y))
                    .collect::<Vec<_>>(),
            )];
            let s = series.clone();
            finishes(&format!("lines, {name}"), move || {
                lines("t", "x", "y", &s, false, &p)
            });
            let p = dir.join(format!("g{k}.png"));
            finishes(&format!("log lines, {name}"), move || {
                lines("t", "x", "y", &series, true, &p)
            });
            // The values as x positions, too.
            let p = dir.join(format!("x{k}.png"));
            let series = vec![(
                "f".to_string(),
                v.iter().map(|&x| (x, 1.0)).collect::<Vec<_>>(),
            )];
            finishes(&format!("lines along x, {name}"), move || {
                lines("t", "x", "y", &series, false, &p)
            });
        }
        // Sizes: empty and too large fields are errors that say so.
        let p = dir.join("e.png");
        assert_eq!(
            heatmap(&[], 0, 3, "e", &p).unwrap_err().to_string(),
            format!(
                "{}: the field is empty (0 x 3 cells): there is nothing to draw",
                p.display()
            )
        );
        assert_eq!(
            heatmap(&vec![0.0; 5000], 5000, 1, "e", &p)
                .unwrap_err()
                .to_string(),
            format!(
                "{}: a 5000 x 1 field is too large to draw: at most 4096 cells a side",
                p.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
