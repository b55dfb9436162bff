//! The agent's answers as the plugin shows them, made from the wire once: a cluster's status
//! (`status`, `fleet`, `policy show`, both dashboards) and a Flux object (`get`, `dashboard`).
//! Shared by several commands, so a page and a table never disagree; they import no command.

pub mod object;
pub mod status;
