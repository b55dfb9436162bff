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
                meta name="referrer" content="no-referrer";
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

    /// The tone of a Kubernetes condition status.
    pub fn of_condition(status: &str) -> Self {
        match status {
            "True" => Self::Good,
            "False" => Self::Bad,
            _ => Self::Muted,
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
