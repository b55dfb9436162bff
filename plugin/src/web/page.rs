//! What every page shares: the document around it, and small pieces (a state badge, a
//! definition list), rendered on the server with maud, which escapes every value it inserts.

use maud::{DOCTYPE, Markup, html};

/// The document: `live` is the address of the page's server-sent events, which the page's
/// script follows (none: a page that does not change by itself).
pub fn layout(title: &str, live: Option<&str>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (title) }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body data-live=[live] {
                header.top {
                    a.brand href="/" { "tenantflux" }
                    span.title { (title) }
                    @if live.is_some() {
                        span #live-state .live role="status" aria-live="polite" { "connecting…" }
                    }
                }
                (content)
            }
        }
    }
}

/// How a state reads at a glance; the CSS colours each tone, the text says it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Good,
    Warn,
    Bad,
    Muted,
}

impl Tone {
    pub fn class(self) -> &'static str {
        match self {
            Self::Good => "good",
            Self::Warn => "warn",
            Self::Bad => "bad",
            Self::Muted => "muted",
        }
    }
}

/// A word with its tone.
pub fn badge(text: &str, tone: Tone) -> Markup {
    html! { span class={ "badge " (tone.class()) } { (text) } }
}

/// Term and description pairs; empty descriptions are left out.
pub fn facts(pairs: &[(&str, Markup)]) -> Markup {
    html! {
        dl.facts {
            @for (term, description) in pairs {
                dt { (term) }
                dd { (description) }
            }
        }
    }
}

/// Percent-encodes a value for a path segment or a query (names of Kubernetes objects need
/// little of it).
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A horizontal bar chart as inline SVG: one bar per (label, count), longest for the largest
/// count, each with its label and count as text. Sizes are attributes, not styles: the
/// Content-Security-Policy allows no inline style.
pub fn bar_chart(title: &str, bars: &[(String, usize)]) -> Markup {
    const LABEL: usize = 170;
    const BAR: usize = 240;
    const ROW: usize = 24;
    const WIDTH: usize = LABEL + BAR + 50;
    let most = bars.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let height = (bars.len().max(1)) * ROW + 4;
    html! {
        figure.chart {
            figcaption { (title) }
            svg.chart xmlns="http://www.w3.org/2000/svg" role="img" aria-label=(title)
                width=(WIDTH) height=(height) viewBox={ "0 0 " (WIDTH) " " (height) } {
                title { (title) }
                @if bars.is_empty() {
                    text x="0" y="16" { "none" }
                }
                @for (i, (label, count)) in bars.iter().enumerate() {
                    @let y = i * ROW + 2;
                    @let width = (count * BAR).div_ceil(most).max(1);
                    g.bar data-label=(label) data-count=(count) {
                        text x="0" y=(y + 15) { (label) }
                        rect x=(LABEL) y=(y) width=(width) height=(ROW - 6) {}
                        text x=(LABEL + width + 6) y=(y + 15) { (count) }
                    }
                }
            }
        }
    }
}
