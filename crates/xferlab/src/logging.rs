//! Logging through `tracing`: the server's log lines on stdout, `-v`/`-vv`
//! diagnostics on stderr, and the escaping that keeps peer-supplied text
//! (an iperf3 client's version string, a congestion-control name, a
//! peer's error message) from forging lines or driving the terminal.
//!
//! Two layers read the same events:
//! * [`SERVER_LOG`] events at `info` are the server's log: one line per
//!   session event on stdout, `TIME MESSAGE`, as `xferlab server` has
//!   always printed them (tests and operators read these lines).
//! * everything else is a diagnostic, shown on stderr from `-v` (debug)
//!   or `-vv` (trace) as `TIME LEVEL TARGET: MESSAGE FIELDS`; stderr, so
//!   `-J` output on stdout stays clean.
//!
//! Escaping happens here, in the formatter, so every event is covered
//! whatever its call site interpolates.

use std::fmt::{self, Write as _};
use std::io;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Target of the server's own log lines (`xferlab server` prints them on
/// stdout at `info`).
pub const SERVER_LOG: &str = "xferlab::server_log";

/// The most verbose diagnostic level for `-v` given `count` times:
/// warnings by default, debug with `-v`, trace with `-vv`.
pub fn level(count: u8) -> Level {
    match count {
        0 => Level::WARN,
        1 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// Installs the process-wide subscriber. Called once from `main`; a
/// second call (tests) leaves the first in place.
pub fn init(verbose: u8) {
    let max = level(verbose);
    let server_log = tracing_subscriber::fmt::layer()
        .with_writer(io::stdout)
        .event_format(Line { diagnostic: false })
        .with_filter(filter_fn(|m| {
            m.target() == SERVER_LOG && *m.level() <= Level::INFO
        }));
    let diagnostics = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .event_format(Line { diagnostic: true })
        .with_filter(filter_fn(move |m| {
            m.target() != SERVER_LOG && *m.level() <= max
        }));
    tracing_subscriber::registry()
        .with(server_log)
        .with(diagnostics)
        .try_init()
        .ok();
}

/// One event on one line: `TIME MESSAGE` for the server's log, `TIME
/// LEVEL TARGET: MESSAGE k=v...` for diagnostics. Every value is escaped
/// with [`Escaped`].
struct Line {
    diagnostic: bool,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The wall clock to the second, as the server log always had.
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        write!(w, "{now} ")?;
        let meta = event.metadata();
        if self.diagnostic {
            write!(w, "{} {}: ", meta.level(), meta.target())?;
        }
        let mut fields = Fields {
            out: Escaped(&mut w),
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writeln!(w)
    }
}

/// Writes the `message` field bare and the others as ` name=value`.
struct Fields<'a, W: fmt::Write> {
    out: Escaped<'a, W>,
    result: fmt::Result,
}

impl<W: fmt::Write> Visit for Fields<'_, W> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = if field.name() == "message" {
            write!(self.out, "{value:?}")
        } else {
            write!(self.out, " {}={value:?}", field.name())
        };
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }
}

/// A writer that passes text through but escapes what could forge a log
/// line or act on a terminal: control characters (newlines, ESC and so
/// ANSI sequences, C1 controls), the Unicode line and paragraph
/// separators and the bidi overrides that reorder what a reader sees. They are written as Rust escapes (`\n`,
/// `\u{1b}`, `\u{202e}`); all other text, quotes and backslashes
/// included, is unchanged, so our own messages read as before.
pub struct Escaped<'a, W: fmt::Write>(pub &'a mut W);

impl<W: fmt::Write> fmt::Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some((i, c)) = rest.char_indices().find(|&(_, c)| needs_escape(c)) {
            self.0.write_str(&rest[..i])?;
            write!(self.0, "{}", c.escape_debug())?;
            rest = &rest[i + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

fn needs_escape(c: char) -> bool {
    // Control characters (NEL, U+0085, among them) and the line and
    // paragraph separators, which some viewers break a line at; then the
    // bidi marks and overrides.
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn escaped(s: &str) -> String {
        let mut out = String::new();
        write!(Escaped(&mut out), "{s}").unwrap();
        out
    }

    #[test]
    fn control_characters_and_bidi_overrides_are_escaped_the_rest_kept() {
        assert_eq!(
            escaped("3.21\u{1b}[2J\nFAKE\r\t\u{9b}x\u{202e}y"),
            "3.21\\u{1b}[2J\\nFAKE\\r\\t\\u{9b}x\\u{202e}y"
        );
        assert_eq!(
            escaped("a\u{2028}b\u{2029}c\u{85}d"),
            "a\\u{2028}b\\u{2029}c\\u{85}d"
        );
        let ours = "-C/--congestion: 'bbr' is not a \"name\" \\ ok; ünïcode 10 Gbit/s";
        assert_eq!(escaped(ours), ours);
    }

    /// Collects what a layer writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn capture(diagnostic: bool, max: Level, emit: impl FnOnce()) -> String {
        let sink = Sink::default();
        let out = sink.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || out.clone())
            .event_format(Line { diagnostic })
            .with_filter(filter_fn(move |m| *m.level() <= max));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_server_log_line_is_time_and_message_with_peer_text_escaped() {
        let version = "3.21\u{1b}[2J\n2000-01-01T00:00:00Z forged line";
        let out = capture(false, Level::INFO, || {
            tracing::info!(target: SERVER_LOG, "{}", format_args!("peer: iperf3 {version} client"));
        });
        assert_eq!(out.lines().count(), 1, "{out:?}");
        let (time, msg) = out.trim_end().split_once(' ').unwrap();
        assert!(humantime::parse_rfc3339(time).is_ok(), "{out:?}");
        assert_eq!(
            msg,
            "peer: iperf3 3.21\\u{1b}[2J\\n2000-01-01T00:00:00Z forged line client"
        );
    }

    #[test]
    fn a_diagnostic_names_level_target_and_fields() {
        let out = capture(true, Level::DEBUG, || {
            tracing::debug!(target: "xferlab::server", peer = "a\nb", "accepted");
            tracing::trace!("not shown at debug");
        });
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(
            out.trim_end()
                .ends_with(" DEBUG xferlab::server: accepted peer=\"a\\nb\""),
            "{out:?}"
        );
    }

    #[test]
    fn verbosity_counts_map_to_levels() {
        assert_eq!(level(0), Level::WARN);
        assert_eq!(level(1), Level::DEBUG);
        assert_eq!(level(2), Level::TRACE);
        assert_eq!(level(5), Level::TRACE);
    }
}
