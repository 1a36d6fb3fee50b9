//! What the Query service and the web page show, computed once for both: aligned search and
//! the timeline.

pub mod search;
pub mod timeline;
