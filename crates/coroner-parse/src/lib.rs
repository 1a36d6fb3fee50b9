//! coroner's line parsers: bytes in, typed [`Event`](coroner_model::Event)s out.
//!
//! Total by construction: parsing never fails and never drops a line. A line no parser
//! understands produces no event and stays a plain, searchable line in the index.

pub mod prefix;
