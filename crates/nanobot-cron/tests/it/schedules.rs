use chrono::{DateTime, Datelike, Utc, Weekday};
use chrono_tz::{America::New_York, Europe::Berlin, Tz, UTC};
use nanobot_cron::{CronError, CronExpr, CronSchedule};

use crate::utc;

fn next(expr: &str, tz: Tz, after: DateTime<Utc>) -> DateTime<Utc> {
    CronExpr::parse(expr).unwrap().next_after(after, tz).unwrap()
}

fn series(expr: &str, tz: Tz, mut after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let e = CronExpr::parse(expr).unwrap();
    (0..n)
        .map(|_| {
            after = e.next_after(after, tz).unwrap();
            after
        })
        .collect()
}

#[test]
fn weekdays_at_nine_across_dst_berlin_and_new_york() {
    // Berlin: deps.md reference value (Fri 2024-03-29 10:00Z → Mon 09:00 CEST)
    assert_eq!(
        next("0 9 * * MON-FRI", Berlin, utc(2024, 3, 29, 10, 0)),
        utc(2024, 4, 1, 7, 0)
    );
    // Berlin 2026: Fri 27 Mar 09:00 CET = 08:00Z; DST starts Sun 29 Mar; Mon 30 Mar 09:00 CEST = 07:00Z
    assert_eq!(
        series("0 9 * * MON-FRI", Berlin, utc(2026, 3, 26, 12, 0), 2),
        vec![utc(2026, 3, 27, 8, 0), utc(2026, 3, 30, 7, 0)]
    );
    // New York 2026: DST starts Sun 8 Mar; Fri 6 Mar 09:00 EST = 14:00Z, Mon 9 Mar 09:00 EDT = 13:00Z
    assert_eq!(
        series("0 9 * * MON-FRI", New_York, utc(2026, 3, 5, 20, 0), 2),
        vec![utc(2026, 3, 6, 14, 0), utc(2026, 3, 9, 13, 0)]
    );
    // and back in autumn: Fri 30 Oct 09:00 EDT = 13:00Z, DST ends Sun 1 Nov, Mon 2 Nov 09:00 EST = 14:00Z
    assert_eq!(
        series("0 9 * * 1-5", New_York, utc(2026, 10, 29, 20, 0), 2),
        vec![utc(2026, 10, 30, 13, 0), utc(2026, 11, 2, 14, 0)]
    );
    for t in series("0 9 * * MON-FRI", Berlin, utc(2026, 3, 1, 0, 0), 30) {
        let local = t.with_timezone(&Berlin);
        assert!(!matches!(local.weekday(), Weekday::Sat | Weekday::Sun), "{local}");
        assert_eq!(local.format("%H:%M").to_string(), "09:00");
    }
}

#[test]
fn spring_forward_gap_runs_after_the_jump_once() {
    // Berlin: 2026-03-29 02:00 CET → 03:00 CEST; 02:30 does not exist → 03:30 CEST = 01:30Z
    assert_eq!(
        series("30 2 * * *", Berlin, utc(2026, 3, 28, 12, 0), 3),
        vec![
            utc(2026, 3, 29, 1, 30),
            utc(2026, 3, 30, 0, 30),
            utc(2026, 3, 31, 0, 30)
        ]
    );
    // New York hourly across the gap: 01:00 EST (06:00Z), then 03:00 EDT (07:00Z) once, then 04:00 EDT
    assert_eq!(
        series("0 * * * *", New_York, utc(2026, 3, 8, 5, 30), 3),
        vec![
            utc(2026, 3, 8, 6, 0),
            utc(2026, 3, 8, 7, 0),
            utc(2026, 3, 8, 8, 0)
        ]
    );
}

#[test]
fn fall_back_repeated_hour_runs_once() {
    // Berlin: 2026-10-25 03:00 CEST → 02:00 CET; 02:30 happens at 00:30Z and 01:30Z: run at the first only
    assert_eq!(
        series("30 2 * * *", Berlin, utc(2026, 10, 24, 12, 0), 2),
        vec![utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    );
    // New York: 2026-11-01 02:00 EDT → 01:00 EST; 01:30 at 05:30Z (EDT) and 06:30Z (EST)
    assert_eq!(
        series("30 1 * * *", New_York, utc(2026, 10, 31, 12, 0), 2),
        vec![utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    );
    // asked during the repeated hour (01:00 EST = 06:00Z), the already-passed first 01:30 is not returned
    assert_eq!(
        next("30 1 * * *", New_York, utc(2026, 11, 1, 6, 0)),
        utc(2026, 11, 2, 6, 30)
    );
}

#[test]
fn day_of_month_or_day_of_week_like_crontab() {
    // 2026-01-01 is a Thursday: Fridays 2, 9, 16 and the 13th (a Tuesday) all match
    assert_eq!(
        series("0 0 13 * FRI", UTC, utc(2026, 1, 1, 0, 0), 5),
        vec![
            utc(2026, 1, 2, 0, 0),
            utc(2026, 1, 9, 0, 0),
            utc(2026, 1, 13, 0, 0),
            utc(2026, 1, 16, 0, 0),
            utc(2026, 1, 23, 0, 0)
        ]
    );
    // only one of them restricted: plain AND with `*`
    assert_eq!(
        series("0 0 13 * *", UTC, utc(2026, 1, 1, 0, 0), 2),
        vec![utc(2026, 1, 13, 0, 0), utc(2026, 2, 13, 0, 0)]
    );
    assert_eq!(
        series("0 0 * * FRI", UTC, utc(2026, 1, 1, 0, 0), 2),
        vec![utc(2026, 1, 2, 0, 0), utc(2026, 1, 9, 0, 0)]
    );
    // a stepped day-of-month counts as restricted (croniter, which the Python version uses)
    assert_eq!(
        series("0 0 */10 * MON", UTC, utc(2026, 1, 1, 0, 0), 4),
        vec![
            utc(2026, 1, 5, 0, 0),
            utc(2026, 1, 11, 0, 0),
            utc(2026, 1, 12, 0, 0),
            utc(2026, 1, 19, 0, 0)
        ]
    );
}

#[test]
fn sunday_is_zero_or_seven_and_names_work() {
    let after = utc(2026, 1, 1, 0, 0); // Thursday
    let sunday = utc(2026, 1, 4, 12, 0);
    for expr in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN", "0 12 * * sun"] {
        assert_eq!(next(expr, UTC, after), sunday, "{expr}");
    }
    // 5-7 = Fri, Sat, Sun
    assert_eq!(
        series("0 12 * * 5-7", UTC, after, 4),
        vec![
            utc(2026, 1, 2, 12, 0),
            utc(2026, 1, 3, 12, 0),
            utc(2026, 1, 4, 12, 0),
            utc(2026, 1, 9, 12, 0)
        ]
    );
    // 1 = Monday (the cron crate alone would read 1 as Sunday)
    assert_eq!(next("0 12 * * 1", UTC, after), utc(2026, 1, 5, 12, 0));
    // 0-6 and 0-7 are every day
    assert_eq!(next("0 12 * * 0-6", UTC, after), utc(2026, 1, 1, 12, 0));
    assert_eq!(
        series("0 12 * * 0-7", UTC, after, 2),
        vec![utc(2026, 1, 1, 12, 0), utc(2026, 1, 2, 12, 0)]
    );
    // months by name, steps, macros
    assert_eq!(next("0 0 1 JUN *", UTC, after), utc(2026, 6, 1, 0, 0));
    assert_eq!(
        next("*/20 * * * *", UTC, utc(2026, 1, 1, 0, 5)),
        utc(2026, 1, 1, 0, 20)
    );
    assert_eq!(next("@weekly", UTC, after), utc(2026, 1, 4, 0, 0));
    assert_eq!(next("@hourly", UTC, utc(2026, 1, 1, 0, 5)), utc(2026, 1, 1, 1, 0));
}

#[test]
fn every_and_at_schedules_across_dst() {
    let hour = std::time::Duration::from_secs(3600);
    let every = CronSchedule::every(hour);
    // an interval is real elapsed time, whatever the zone does
    let t = utc(2026, 3, 29, 0, 30).timestamp_millis();
    assert_eq!(every.next_run_after(t, Berlin).unwrap(), Some(t + 3_600_000));
    let t = utc(2026, 11, 1, 5, 30).timestamp_millis();
    assert_eq!(every.next_run_after(t, New_York).unwrap(), Some(t + 3_600_000));

    // `at` without an offset is read on the default zone's wall clock
    let at = CronSchedule::parse_at("2026-03-29T03:30:00", Berlin).unwrap();
    assert_eq!(at, utc(2026, 3, 29, 1, 30));
    assert_eq!(
        CronSchedule::parse_at("2026-03-28T03:30", Berlin).unwrap(),
        utc(2026, 3, 28, 2, 30)
    );
    assert_eq!(
        CronSchedule::parse_at("2026-10-25T02:30:00", Berlin).unwrap(),
        utc(2026, 10, 25, 0, 30)
    );
    assert_eq!(
        CronSchedule::parse_at("2026-11-01T01:30:00-05:00", Berlin).unwrap(),
        utc(2026, 11, 1, 6, 30)
    );
    assert!(matches!(
        CronSchedule::parse_at("2026-03-29T02:30:00", Berlin),
        Err(CronError::InvalidSchedule { field: "at", .. })
    ));
    assert!(CronSchedule::parse_at("tomorrow", Berlin).is_err());

    let s = CronSchedule::at(at);
    assert_eq!(
        s.next_run_after(at.timestamp_millis() - 1, UTC).unwrap(),
        Some(at.timestamp_millis())
    );
    assert_eq!(s.next_run_after(at.timestamp_millis(), UTC).unwrap(), None);

    // cron schedule with its own zone, default zone otherwise
    let t = utc(2026, 3, 27, 12, 0).timestamp_millis();
    // 12:00Z is 08:00 in New York (EDT since 8 March) and 13:00 in Berlin (still CET)
    let c = CronSchedule::cron("0 9 * * *", Some("America/New_York".into()));
    assert_eq!(
        c.next_run_after(t, Berlin).unwrap(),
        Some(utc(2026, 3, 27, 13, 0).timestamp_millis())
    );
    let c = CronSchedule::cron("0 9 * * *", None);
    assert_eq!(
        c.next_run_after(t, Berlin).unwrap(),
        Some(utc(2026, 3, 28, 8, 0).timestamp_millis())
    );
}

#[test]
fn bad_expressions_and_zones_rejected_naming_the_field() {
    let bad = [
        ("0 9 * * MON-FRX", "day-of-week"),
        ("0 9 * * 8", "day-of-week"),
        ("60 * * * *", "minute"),
        ("0 9 32 * *", "day-of-month"),
        ("0 9 * 0 *", "month"),
        ("0 0 9 * * MON", "expression"),
        ("", "expression"),
        ("0 0 30 2 *", "expression"),
    ];
    for (expr, field) in bad {
        let err = CronSchedule::cron(expr, None).validate().unwrap_err();
        match &err {
            CronError::InvalidExpr { field: f, .. } => assert_eq!(*f, field, "{expr}"),
            other => panic!("{expr}: {other:?}"),
        }
        assert!(err.to_string().contains(field), "{err}");
    }
    let err = CronSchedule::cron("0 9 * * *", Some("Europe/Berln".into()))
        .validate()
        .unwrap_err();
    assert!(
        matches!(err, CronError::UnknownTimezone { ref tz } if tz == "Europe/Berln"),
        "{err}"
    );
    let err = CronSchedule::every(std::time::Duration::from_millis(10))
        .validate()
        .unwrap_err();
    assert!(matches!(err, CronError::InvalidSchedule { field: "everyMs", .. }));
}

#[test]
fn tool_arguments_build_schedules_like_the_python_tool() {
    use nanobot_cron::ScheduleArgs;
    let args = |every: Option<i64>, expr: Option<&str>, tz: Option<&str>, at: Option<&str>| ScheduleArgs {
        every_seconds: every,
        cron_expr: expr.map(Into::into),
        tz: tz.map(Into::into),
        at: at.map(Into::into),
    };
    let s = CronSchedule::from_args(&args(Some(3600), None, None, None), UTC).unwrap();
    assert_eq!(s.every_ms, Some(3_600_000));
    let s = CronSchedule::from_args(
        &args(None, Some("0 9 * * MON-FRI"), Some("Europe/Berlin"), None),
        UTC,
    )
    .unwrap();
    assert_eq!(
        (s.expr.as_deref(), s.tz.as_deref()),
        (Some("0 9 * * MON-FRI"), Some("Europe/Berlin"))
    );
    let s = CronSchedule::from_args(&args(None, None, None, Some("2026-05-01T09:00:00")), Berlin).unwrap();
    assert_eq!(s.at_ms, Some(utc(2026, 5, 1, 7, 0).timestamp_millis()));
    // every_seconds = 0 counts as absent, like in Python
    assert!(CronSchedule::from_args(&args(Some(0), Some("@daily"), None, None), UTC).is_ok());

    let field = |a: ScheduleArgs| match CronSchedule::from_args(&a, UTC) {
        Err(CronError::InvalidSchedule { field, .. }) => field,
        Err(CronError::InvalidExpr { field, .. }) => field,
        Err(CronError::UnknownTimezone { .. }) => "tz-unknown",
        other => panic!("{other:?}"),
    };
    assert_eq!(field(args(None, None, None, None)), "schedule");
    assert_eq!(field(args(Some(60), Some("* * * * *"), None, None)), "schedule");
    assert_eq!(field(args(Some(60), None, Some("UTC"), None)), "tz");
    assert_eq!(field(args(Some(-5), None, None, None)), "every_seconds");
    assert_eq!(
        field(args(None, Some("0 9 * * *"), Some("Moon/Base"), None)),
        "tz-unknown"
    );
    assert_eq!(field(args(None, Some("0 9 * *"), None, None)), "expression");
    assert_eq!(field(args(None, None, None, Some("next tuesday"))), "at");
}

#[test]
fn job_description_line() {
    let text = r#"{"id":"1a2b3c4d","name":"Morning brief","enabled":true,
        "schedule":{"kind":"cron","expr":"0 9 * * MON-FRI","tz":"Europe/Berlin"},
        "payload":{"kind":"agent_turn","message":"brief"},
        "state":{"nextRunAtMs":1774854000000,"lastStatus":"ok"},"createdAtMs":0,"updatedAtMs":0}"#;
    let job: nanobot_cron::CronJob = serde_json::from_str(text).unwrap();
    assert_eq!(
        job.describe(Berlin),
        "- Morning brief (id: 1a2b3c4d, cron 0 9 * * MON-FRI (Europe/Berlin), next: 2026-03-30 09:00 CEST, last: ok)"
    );
    let mut hb = job.clone();
    hb.id = "heartbeat".into();
    hb.enabled = false;
    assert!(
        hb.describe(Berlin)
            .ends_with("disabled, last: ok) [system job: view only]")
    );
}
