//! The experiment report as one self-contained HTML page: inline CSS, plots as inline SVG,
//! tables as given, nothing loaded from elsewhere, so the file can be mailed, archived or
//! opened offline and still shows everything.
//!
//! This module owns the page layout and the escaping of text put into it. Text (title,
//! description, headings, paragraphs, captions) is HTML-escaped here; tables and SVGs arrive
//! already rendered (by the table renderer and [`super::plot::render_svg`], which escape their
//! own text) and are inserted as they are.

use std::fmt::Write as _;

/// One block of the page body, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum HtmlSection {
    /// A section heading (`<h2>`), escaped.
    Heading(String),
    /// A paragraph of text, escaped.
    Paragraph(String),
    /// An already-rendered `<table>`, inserted verbatim.
    TableHtml(String),
    /// An SVG document from `render_svg`, inlined, with its caption (escaped) under it.
    Plot { svg: String, caption: String },
}

/// Escapes `s` for HTML text and attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;\
margin:0;background:#fafafa;color:#1a1a1a;line-height:1.45}\
main{max-width:980px;margin:0 auto;padding:16px 24px 48px;background:#fff}\
h1{font-size:1.6em;margin:.6em 0 .3em}\
h2{font-size:1.25em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:.2em}\
p.description{color:#333}\
figure.plot{margin:1em 0 1.5em}\
figure.plot svg{display:block;max-width:100%;height:auto;border:1px solid #e4e4e4}\
figcaption{font-size:.9em;color:#444;margin-top:.35em}\
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}\
th,td{border:1px solid #d4d4d4;padding:3px 9px;vertical-align:top}\
th{background:#f1f1f1;text-align:left}\
tbody tr:nth-child(even) td{background:#fafafa}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
.table-wrap{overflow-x:auto}";

/// The report page: `title` as `<title>` and `<h1>`, `description` as paragraphs (split at
/// blank lines), then `sections` in order. Self-contained: no external resources.
pub fn html_page(title: &str, description: &str, sections: &[HtmlSection]) -> String {
    let mut out = String::new();
    let t = escape_html(title);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n<h1>{t}</h1>\n"
    );
    for para in description
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let _ = writeln!(out, "<p class=\"description\">{}</p>", escape_html(para));
    }
    for s in sections {
        match s {
            HtmlSection::Heading(h) => {
                let _ = writeln!(out, "<h2>{}</h2>", escape_html(h));
            }
            HtmlSection::Paragraph(p) => {
                let _ = writeln!(out, "<p>{}</p>", escape_html(p));
            }
            HtmlSection::TableHtml(t) => {
                let _ = writeln!(out, "<div class=\"table-wrap\">\n{}\n</div>", t.trim());
            }
            HtmlSection::Plot { svg, caption } => {
                let _ = writeln!(
                    out,
                    "<figure class=\"plot\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
                    strip_xml_prolog(svg).trim(),
                    escape_html(caption)
                );
            }
        }
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

/// An SVG document inlined into HTML must not carry an XML declaration or doctype.
fn strip_xml_prolog(svg: &str) -> &str {
    let mut s = svg.trim_start();
    loop {
        if s.starts_with("<?xml") || s.starts_with("<!DOCTYPE") {
            match s.find('>') {
                Some(i) => s = s[i + 1..].trim_start(),
                None => return s,
            }
        } else {
            return s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text_but_not_tables_or_svg() {
        let page = html_page(
            "a & b <c>",
            "first \"para\"\n\nsecond 'para'",
            &[
                HtmlSection::Heading("x<y".into()),
                HtmlSection::Paragraph("p & q".into()),
                HtmlSection::TableHtml("<table><tr><td>1</td></tr></table>".into()),
                HtmlSection::Plot {
                    svg: "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"><text>A &amp; B</text></svg>"
                        .into(),
                    caption: "mean & CI95 <n=5>".into(),
                },
            ],
        );
        assert!(page.contains("<title>a &amp; b &lt;c&gt;</title>"));
        assert!(page.contains("<h1>a &amp; b &lt;c&gt;</h1>"));
        assert!(page.contains("<p class=\"description\">first &quot;para&quot;</p>"));
        assert!(page.contains("<p class=\"description\">second &#39;para&#39;</p>"));
        assert!(page.contains("<h2>x&lt;y</h2>"));
        assert!(page.contains("<p>p &amp; q</p>"));
        assert!(page.contains("<table><tr><td>1</td></tr></table>"));
        assert!(
            page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\"><text>A &amp; B</text></svg>")
        );
        assert!(!page.contains("<?xml"));
        assert!(page.contains("<figcaption>mean &amp; CI95 &lt;n=5&gt;</figcaption>"));
        assert!(!page.contains("a & b"));
    }

    #[test]
    fn is_self_contained() {
        let plot = crate::experiment::plot::Plot {
            title: "t".into(),
            kind: crate::experiment::plot::PlotKind::Lines,
            x_label: "x (s)".into(),
            y_label: "y (B)".into(),
            x_categories: None,
            log_x: false,
            series: vec![crate::experiment::plot::Series {
                label: "s".into(),
                points: vec![crate::experiment::plot::PlotPoint::new(1.0, 2.0)],
            }],
            caption: "c".into(),
        };
        let svg = crate::experiment::plot::render_svg(&plot).unwrap();
        let page = html_page(
            "t",
            "d",
            &[HtmlSection::Plot {
                svg,
                caption: "c".into(),
            }],
        );
        let lower = page.to_ascii_lowercase();
        for bad in ["<link", "<script", "src=", "@import", "url(", "href="] {
            assert!(
                !lower.contains(bad),
                "page refers to something outside: {bad}"
            );
        }
        // The only URL is the SVG namespace, which is a name, not a resource.
        assert_eq!(
            lower.matches("http").count(),
            lower
                .matches("xmlns=\"http://www.w3.org/2000/svg\"")
                .count()
        );
        assert_eq!(page.matches("<svg").count(), 1);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.trim_end().ends_with("</html>"));
    }

    /// A page with a table and two plots; written to $XFERLAB_PLOT_PNG_DIR/report.html when set,
    /// to look at in a browser.
    #[test]
    fn sample_page() {
        use crate::experiment::plot::{render_svg, Plot, PlotKind, PlotPoint, Series};
        let lines = Plot {
            title: "Throughput by buffer size".into(),
            kind: PlotKind::Lines,
            x_label: "socket buffer".into(),
            y_label: "throughput (Mbit/s)".into(),
            x_categories: Some(vec!["64K".into(), "256K".into(), "1M".into()]),
            log_x: false,
            series: vec![Series {
                label: "cubic".into(),
                points: (0..3)
                    .map(|i| {
                        let y = 300.0 + 200.0 * i as f64;
                        PlotPoint::with_err(i as f64, y, y - 20.0, y + 25.0)
                    })
                    .collect(),
            }],
            caption: "median of 5 repeats; whiskers: 95% CI of the median".into(),
        };
        let mut bars = lines.clone();
        bars.kind = PlotKind::Bars;
        bars.title = "Same data as bars".into();
        let sections = vec![
            HtmlSection::Heading("Results".into()),
            HtmlSection::Paragraph("3 points x 5 repeats, 15 runs, 0 failed.".into()),
            HtmlSection::TableHtml(
                "<table><thead><tr><th>buffer</th><th class=\"num\">Mbit/s</th></tr></thead>\
                 <tbody><tr><td>64K</td><td class=\"num\">300</td></tr>\
                 <tr><td>256K</td><td class=\"num\">500</td></tr></tbody></table>"
                    .into(),
            ),
            HtmlSection::Plot {
                caption: lines.caption.clone(),
                svg: render_svg(&lines).unwrap(),
            },
            HtmlSection::Plot {
                caption: bars.caption.clone(),
                svg: render_svg(&bars).unwrap(),
            },
        ];
        let page = html_page(
            "buffers: cubic over loopback",
            "Scenario buffers.toml, 2 knobs.\n\nRun on host x.",
            &sections,
        );
        assert_eq!(page.matches("<figure").count(), 2);
        assert_eq!(page.matches("<figcaption>").count(), 2);
        if let Some(dir) = std::env::var_os("XFERLAB_PLOT_PNG_DIR") {
            let dir = std::path::Path::new(&dir);
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("report.html"), &page).unwrap();
        }
    }

    #[test]
    fn strips_prolog_only() {
        assert_eq!(strip_xml_prolog("<svg/>"), "<svg/>");
        assert_eq!(
            strip_xml_prolog("<?xml version=\"1.0\"?><!DOCTYPE svg><svg/>"),
            "<svg/>"
        );
    }
}
