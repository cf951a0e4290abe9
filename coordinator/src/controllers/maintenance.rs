//! Maintenance windows (`spec.rollout.maintenance`): when a pool may start moving nodes to a new
//! config. The shape is Zincati's periodic strategy (weekly windows: days, a start time and a
//! length, in one time zone); unlike Zincati, which gates each node's own reboot, the coordinator
//! gates the pick, so an update started in a window finishes even if the window closes meanwhile
//! (a node half drained or mid-reboot is not left so until next week).
//!
//! Time zones come from the coordinator's IANA database (`/usr/share/zoneinfo`, as `timedatectl`
//! reads it). A window starts at the first instant its local start time names: a start inside a
//! daylight saving gap (02:30 on the night clocks go from 02:00 to 03:00) opens at 03:30, after
//! the gap, and one inside a repeated hour opens at its first occurrence (RFC 5545's rules, as
//! calendars schedule). Its length is elapsed time: a 60-minute window is open 60 minutes
//! whatever the clocks do meanwhile.

use aloft_api::MaintenanceSchedule;
use chrono::{DateTime, Utc};
use jiff::tz::TimeZone;
use jiff::{civil, SignedDuration, Span, Timestamp};

/// The longest window: a week (a longer one is always open; write no schedule for that).
pub const MAX_LENGTH_MINUTES: i64 = 7 * 24 * 60;

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const DAY_NAMES: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// A field of the schedule that is not what it must be, with its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    /// `Required value` or `Invalid value: …`, as admission words it.
    pub message: String,
    pub required: bool,
}

/// A parsed schedule, ready to answer [`Schedule::state`].
#[derive(Debug, Clone)]
pub struct Schedule {
    tz: TimeZone,
    tz_name: String,
    windows: Vec<Window>,
}

#[derive(Debug, Clone)]
struct Window {
    /// By day, Monday first.
    days: [bool; 7],
    start: civil::Time,
    minutes: i64,
}

/// Whether nodes may start updating now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowState {
    /// A window is open; it closes then (None: the windows leave no gap, it never closes).
    Open { closes: Option<DateTime<Utc>> },
    /// No window is open; the next opens then.
    Closed { opens: DateTime<Utc> },
}

fn day_index(s: &str) -> Option<usize> {
    DAYS.iter()
        .position(|d| d.eq_ignore_ascii_case(s))
        .or_else(|| DAY_NAMES.iter().position(|d| d.eq_ignore_ascii_case(s)))
}

/// `HH:MM` (or `H:MM`), 24-hour.
fn parse_time(s: &str) -> Option<civil::Time> {
    let (h, m) = s.split_once(':')?;
    let digits = |t: &str, most: usize| !t.is_empty() && t.len() <= most && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(h, 2) || !digits(m, 2) || m.len() != 2 {
        return None;
    }
    let (h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    civil::Time::new(h, m, 0, 0).ok()
}

fn to_chrono(ts: Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(ts.as_second(), ts.subsec_nanosecond().max(0) as u32)
}

fn to_jiff(t: DateTime<Utc>) -> Option<Timestamp> {
    Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32).ok()
}

impl Schedule {
    /// Read `spec` (at `path`, e.g. `spec.rollout.maintenance`); every field that is wrong is
    /// named, not only the first.
    pub fn parse(spec: &MaintenanceSchedule, path: &str) -> Result<Schedule, Vec<FieldError>> {
        let mut errors = Vec::new();
        let invalid = |field: String, message: String| FieldError { field, message, required: false };
        let required = |field: String, message: &str| FieldError {
            field,
            message: format!("Required value: {message}"),
            required: true,
        };
        let tz_name = spec.time_zone.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| "UTC".to_string());
        let tz = match TimeZone::get(&tz_name) {
            Ok(tz) => Some(tz),
            Err(_) => {
                errors.push(invalid(
                    format!("{path}.timeZone"),
                    format!(
                        "Invalid value: {tz_name:?}: not a time zone of this coordinator's database \
                         (/usr/share/zoneinfo); want an IANA name such as \"Europe/Berlin\" or \"UTC\""
                    ),
                ));
                None
            }
        };
        if spec.windows.is_empty() {
            errors.push(required(
                format!("{path}.windows"),
                "at least one window (without one no node would ever update)",
            ));
        }
        let mut windows = Vec::new();
        for (i, w) in spec.windows.iter().enumerate() {
            let at = format!("{path}.windows[{i}]");
            let mut days = [false; 7];
            if w.days.is_empty() {
                errors.push(required(format!("{at}.days"), "the days the window opens on, e.g. [Sat, Sun]"));
            }
            for (k, d) in w.days.iter().enumerate() {
                match day_index(d) {
                    Some(ix) => days[ix] = true,
                    None => errors.push(invalid(
                        format!("{at}.days[{k}]"),
                        format!("Invalid value: {d:?}: want Mon, Tue, Wed, Thu, Fri, Sat or Sun"),
                    )),
                }
            }
            let start = if w.start_time.is_empty() {
                errors.push(required(format!("{at}.startTime"), "HH:MM, 24-hour"));
                None
            } else {
                let t = parse_time(&w.start_time);
                if t.is_none() {
                    errors.push(invalid(
                        format!("{at}.startTime"),
                        format!("Invalid value: {:?}: want HH:MM, 24-hour, such as \"23:30\"", w.start_time),
                    ));
                }
                t
            };
            let minutes = match w.length_minutes {
                None => {
                    errors.push(required(format!("{at}.lengthMinutes"), "how long the window stays open, in minutes"));
                    None
                }
                Some(m) if !(1..=MAX_LENGTH_MINUTES).contains(&m) => {
                    errors.push(invalid(
                        format!("{at}.lengthMinutes"),
                        format!("Invalid value: {m}: must be from 1 to {MAX_LENGTH_MINUTES} (a week)"),
                    ));
                    None
                }
                Some(m) => Some(m),
            };
            if let (Some(start), Some(minutes)) = (start, minutes) {
                windows.push(Window { days, start, minutes });
            }
        }
        match tz {
            Some(tz) if errors.is_empty() => Ok(Schedule { tz, tz_name, windows }),
            _ => Err(errors),
        }
    }

    /// Whether a window is open at `now`, and when that changes.
    pub fn state(&self, now: DateTime<Utc>) -> WindowState {
        let Some(now_ts) = to_jiff(now) else {
            // Outside jiff's range (years beyond ±9999): no window can be worked out.
            return WindowState::Open { closes: None };
        };
        // Every window that opens from 8 days before today to 8 days after: a window is at most
        // a week long, so one open now opened within the last 8 days, and every weekday comes
        // round in the next 8.
        let today = now_ts.to_zoned(self.tz.clone()).date();
        let mut spans: Vec<(Timestamp, Timestamp)> = Vec::new();
        for offset in -8i64..=8 {
            let Ok(date) = today.checked_add(Span::new().days(offset)) else { continue };
            let weekday = date.weekday().to_monday_zero_offset() as usize;
            for w in self.windows.iter().filter(|w| w.days[weekday]) {
                let Ok(start) = date.to_datetime(w.start).to_zoned(self.tz.clone()) else { continue };
                let start = start.timestamp();
                let Ok(end) = start.checked_add(SignedDuration::from_mins(w.minutes)) else { continue };
                spans.push((start, end));
            }
        }
        spans.sort();
        // Windows that overlap or touch make one opening.
        let mut merged: Vec<(Timestamp, Timestamp)> = Vec::new();
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        if let Some(&(_, end)) = merged.iter().find(|(s, e)| *s <= now_ts && now_ts < *e) {
            // Open for a week on end: the windows cover every hour of the week.
            let endless = end.duration_since(now_ts) >= SignedDuration::from_hours(7 * 24);
            return WindowState::Open { closes: if endless { None } else { to_chrono(end) } };
        }
        match merged.iter().find(|(s, _)| *s > now_ts).and_then(|(s, _)| to_chrono(*s)) {
            Some(opens) => WindowState::Closed { opens },
            // Unreachable with a parsed schedule (every window has a day); fail open rather than
            // hold a pool for good on arithmetic at the edge of time.
            None => WindowState::Open { closes: None },
        }
    }

    /// `Sat 2026-12-05 23:30 CET (Europe/Berlin)`: a time as the schedule's owner reads it.
    pub fn local(&self, t: DateTime<Utc>) -> String {
        match to_jiff(t) {
            Some(ts) => {
                let z = ts.to_zoned(self.tz.clone());
                format!("{} ({})", z.strftime("%a %Y-%m-%d %H:%M %Z"), self.tz_name)
            }
            None => t.to_rfc3339(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aloft_api::MaintenanceWindow;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn schedule(tz: Option<&str>, windows: &[(&[&str], &str, i64)]) -> Schedule {
        let spec = MaintenanceSchedule {
            time_zone: tz.map(str::to_string),
            windows: windows
                .iter()
                .map(|(days, start, len)| MaintenanceWindow {
                    days: days.iter().map(|d| d.to_string()).collect(),
                    start_time: start.to_string(),
                    length_minutes: Some(*len),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        Schedule::parse(&spec, "spec.rollout.maintenance").unwrap()
    }

    /// 2026-12-05 is a Saturday.
    #[test]
    fn a_weekend_night_window_opens_and_closes_on_time() {
        let s = schedule(None, &[(&["Sat", "Sun"], "23:30", 60)]);
        assert_eq!(s.state(t("2026-12-05T23:29:59Z")), WindowState::Closed { opens: t("2026-12-05T23:30:00Z") });
        assert_eq!(s.state(t("2026-12-05T23:30:00Z")), WindowState::Open { closes: Some(t("2026-12-06T00:30:00Z")) });
        // Past midnight, the Saturday window is still open on Sunday.
        assert_eq!(s.state(t("2026-12-06T00:10:00Z")), WindowState::Open { closes: Some(t("2026-12-06T00:30:00Z")) });
        assert_eq!(s.state(t("2026-12-06T00:30:00Z")), WindowState::Closed { opens: t("2026-12-06T23:30:00Z") });
        // From Monday, the next is Saturday's.
        assert_eq!(s.state(t("2026-12-07T12:00:00Z")), WindowState::Closed { opens: t("2026-12-12T23:30:00Z") });
    }

    #[test]
    fn windows_that_touch_or_overlap_are_one_opening_and_a_full_week_never_closes() {
        let s = schedule(None, &[(&["Mon"], "22:00", 120), (&["Tue"], "00:00", 60), (&["Mon"], "21:00", 90)]);
        assert_eq!(s.state(t("2026-12-07T21:30:00Z")), WindowState::Open { closes: Some(t("2026-12-08T01:00:00Z")) });
        let always = schedule(None, &[(&["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], "00:00", 1440)]);
        assert_eq!(always.state(t("2026-12-09T05:00:00Z")), WindowState::Open { closes: None });
        let week = schedule(None, &[(&["Wednesday"], "00:00", MAX_LENGTH_MINUTES)]);
        assert_eq!(week.state(t("2026-12-04T05:00:00Z")), WindowState::Open { closes: None });
    }

    /// Europe/Berlin: CET (+01:00) in winter, CEST (+02:00) from 2026-03-29 02:00 (clocks jump
    /// to 03:00) to 2026-10-25 03:00 (clocks go back to 02:00).
    #[test]
    fn windows_follow_the_time_zone_and_its_daylight_saving_time() {
        let s = schedule(Some("Europe/Berlin"), &[(&["Sun"], "02:30", 60)]);
        // Winter: 02:30 CET is 01:30Z.
        assert_eq!(s.state(t("2026-12-06T01:00:00Z")), WindowState::Closed { opens: t("2026-12-06T01:30:00Z") });
        // Summer: 02:30 CEST is 00:30Z.
        assert_eq!(s.state(t("2026-07-05T00:00:00Z")), WindowState::Closed { opens: t("2026-07-05T00:30:00Z") });
        // The spring night has no 02:30: the window opens after the gap, at 03:30 CEST (01:30Z).
        assert_eq!(s.state(t("2026-03-29T00:00:00Z")), WindowState::Closed { opens: t("2026-03-29T01:30:00Z") });
        // The autumn night has 02:30 twice: the first, CEST (00:30Z), for 60 elapsed minutes.
        assert_eq!(s.state(t("2026-10-25T00:00:00Z")), WindowState::Closed { opens: t("2026-10-25T00:30:00Z") });
        assert_eq!(s.state(t("2026-10-25T00:45:00Z")), WindowState::Open { closes: Some(t("2026-10-25T01:30:00Z")) });
        assert_eq!(s.local(t("2026-12-06T01:30:00Z")), "Sun 2026-12-06 02:30 CET (Europe/Berlin)");
    }

    #[test]
    fn every_wrong_field_is_named() {
        let spec = MaintenanceSchedule {
            time_zone: Some("Mars/Olympus".into()),
            windows: vec![
                MaintenanceWindow {
                    days: vec!["Sat".into(), "Funday".into()],
                    start_time: "24:00".into(),
                    length_minutes: Some(0),
                    ..Default::default()
                },
                MaintenanceWindow {
                    days: vec![],
                    start_time: String::new(),
                    length_minutes: None,
                    ..Default::default()
                },
                MaintenanceWindow {
                    days: vec!["mon".into()],
                    start_time: "9:5".into(),
                    length_minutes: Some(MAX_LENGTH_MINUTES + 1),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let errors = Schedule::parse(&spec, "spec.rollout.maintenance").unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.maintenance.timeZone",
                "spec.rollout.maintenance.windows[0].days[1]",
                "spec.rollout.maintenance.windows[0].startTime",
                "spec.rollout.maintenance.windows[0].lengthMinutes",
                "spec.rollout.maintenance.windows[1].days",
                "spec.rollout.maintenance.windows[1].startTime",
                "spec.rollout.maintenance.windows[1].lengthMinutes",
                "spec.rollout.maintenance.windows[2].startTime",
                "spec.rollout.maintenance.windows[2].lengthMinutes",
            ]
        );
        assert!(errors[0].message.contains("\"Mars/Olympus\""), "{}", errors[0]);
        assert!(errors[1].message.contains("\"Funday\": want Mon"), "{}", errors[1]);
        assert!(errors[4].required && errors[4].message.starts_with("Required value"), "{}", errors[4]);
        let empty = MaintenanceSchedule::default();
        let errors = Schedule::parse(&empty, "m").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "m.windows");
        // Full day names and any case are read; one-digit hours too.
        let s = schedule(Some("UTC"), &[(&["monday", "SUN"], "9:05", 1)]);
        assert_eq!(s.state(t("2026-12-07T09:05:30Z")), WindowState::Open { closes: Some(t("2026-12-07T09:06:00Z")) });
    }
}
