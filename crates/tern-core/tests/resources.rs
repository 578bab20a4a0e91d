//! Reading resources: YAML and JSON, defaults, round trips, and validation errors that
//! name the field and the bad value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::codec::{self, Format};
use tern_core::resource::*;
use tern_core::validate::ResourceError;

const TELEPORT_CONFIG: &str = r#"
kind: autoupdate_config
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
      - name: staging
        start_hour: 4
        days: [ "Mon", "Tue", "Wed", "Thu" ]
      - name: production
        start_hour: 5
        wait_hours: 24
        canary_count: 5
  tools:
    mode: enabled
"#;

#[test]
fn a_teleport_config_reads_unchanged() {
    let c = AutoUpdateConfig::from_text(TELEPORT_CONFIG).unwrap();
    assert_eq!(c.mode(), Some(Mode::Enabled));
    assert_eq!(c.strategy(), Strategy::HaltOnError);
    let groups = c.groups();
    assert_eq!(groups[1].name, "production");
    assert_eq!(groups[1].wait_hours, 24);
    assert_eq!(groups[1].canary_count, 5);
    assert_eq!(groups[1].days.len(), 4, "days default to Mon-Thu");
    assert_eq!(c.tools_mode(), ToolsMode::Enabled);
}

#[test]
fn yaml_and_json_read_the_same_and_round_trip() {
    let c = AutoUpdateConfig::from_text(TELEPORT_CONFIG).unwrap();
    let json = codec::to_text(&c, Format::Json).unwrap();
    assert_eq!(AutoUpdateConfig::from_text(&json).unwrap(), c);
    let yaml = codec::to_text(&c, Format::Yaml).unwrap();
    assert_eq!(AutoUpdateConfig::from_text(&yaml).unwrap(), c);
}

#[test]
fn versions_lose_their_leading_v_on_output() {
    let v = AutoUpdateVersion::from_text(
        "kind: autoupdate_version\nspec:\n  agents:\n    start_version: v17.2.0\n    target_version: v17.2.1\n    schedule: immediate\n  tools:\n    target_version: v17.2.1\n",
    )
    .unwrap();
    let out = codec::to_text(&v, Format::Yaml).unwrap();
    assert!(out.contains("start_version: 17.2.0"), "{out}");
    assert!(!out.contains("v17"), "{out}");
    assert_eq!(
        v.metadata.name, NAME_VERSION,
        "the singleton name is filled in"
    );
}

fn config_error(spec_agents: &str) -> String {
    let text = format!("kind: autoupdate_config\nspec:\n  agents:\n{spec_agents}");
    match AutoUpdateConfig::from_text(&text) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn invalid_configs_name_the_field_and_the_value() {
    let cases = [
        (
            "    schedules:\n      regular:\n      - {name: dev, start_hour: 24}\n",
            "spec.agents.schedules.regular[0].start_hour: 24 is out of range",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev}\n      - {name: dev}\n",
            "spec.agents.schedules.regular[1].name: \"dev\" is used by an earlier group",
        ),
        (
            "    schedules:\n      regular:\n      - {name: 'bad name'}\n",
            "spec.agents.schedules.regular[0].name: \"bad name\" is not a valid group name",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, wait_hours: 2}\n",
            "regular[0].wait_hours: 2 must be 0 on the first group",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev}\n      - {name: prod, wait_hours: -1}\n",
            "regular[1].wait_hours: -1 is negative",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, canary_count: 6}\n",
            "regular[0].canary_count: 6 is out of range, expected 0 to 5",
        ),
        (
            "    maintenance_window_duration: 2h\n",
            "spec.agents.maintenance_window_duration: 2h is only valid with strategy time-based",
        ),
        (
            "    strategy: time-based\n    maintenance_window_duration: 5m\n",
            "spec.agents.maintenance_window_duration: 5m is out of range",
        ),
        (
            "    strategy: time-based\n    schedules:\n      regular:\n      - {name: a}\n      - {name: b, wait_hours: 3}\n",
            "regular[1].wait_hours: 3 is only valid with strategy halt-on-error",
        ),
        (
            "    strategy: time-based\n    schedules:\n      regular:\n      - {name: a, canary_count: 1}\n",
            "regular[0].canary_count: 1 is only valid with strategy halt-on-error",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, days: [Mon, Funday]}\n",
            "spec.agents.schedules.regular[0].days[1]: \"Funday\" is not a day",
        ),
        (
            "    mode: enable-ish\n",
            "spec.agents.mode: unknown variant `enable-ish`",
        ),
        (
            "    strategy: yolo\n",
            "spec.agents.strategy: unknown variant `yolo`",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, canary_cont: 2}\n",
            "spec.agents.schedules.regular[0].canary_cont: unknown field `canary_cont`",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, max_in_flight: 150%}\n",
            "spec.agents.schedules.regular[0].max_in_flight: \"150%\" is not a percentage",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, max_in_flight: 0%}\n",
            "spec.agents.schedules.regular[0].max_in_flight: \"0%\" is not a percentage between 1% and 100%",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, alert_after: 0s}\n",
            "spec.agents.schedules.regular[0].alert_after: 0s is 0: the alert would fire",
        ),
        (
            "    schedules:\n      regular:\n      - {name: dev, start_hour: noon}\n",
            "spec.agents.schedules.regular[0].start_hour: invalid type: string \"noon\"",
        ),
    ];
    for (yaml, want) in cases {
        let err = config_error(yaml);
        assert!(err.contains(want), "want {want:?}\n got {err:?}");
    }
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let err = config_error(
        "    schedules:\n      regular:\n      - {name: dev, start_hour: 30, canary_count: 9}\n",
    );
    assert!(err.contains("start_hour: 30"), "{err}");
    assert!(err.contains("canary_count: 9"), "{err}");
}

#[test]
fn headers_are_checked() {
    let err = AutoUpdateConfig::from_text(
        "kind: autoupdate_version\nmetadata: {name: other}\nversion: v2\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("kind: \"autoupdate_version\" is not \"autoupdate_config\""),
        "{err}"
    );
    assert!(
        err.contains("metadata.name: \"other\" is not \"autoupdate-config\""),
        "{err}"
    );
    assert!(err.contains("version: \"v2\" is not \"v1\""), "{err}");
}

#[test]
fn malformed_documents_say_so() {
    let cases = [
        ("", "empty"),
        ("kind: \"autoupdate_version\n", "unexpected end of stream"),
        ("kind: [", "kind: invalid type: sequence, expected a string"),
        (
            "{\"kind\": \"autoupdate_version\", \"spec\": {\"agents\": {\"start_version\": \"1.0\"}}}",
            "spec.agents.start_version",
        ),
        (
            "kind: autoupdate_version\nspec:\n  agents:\n    start_version: 1.0.0\n",
            "missing field `target_version`",
        ),
    ];
    for (text, want) in cases {
        let err = AutoUpdateVersion::from_text(text).unwrap_err();
        assert!(matches!(err, ResourceError::Parse(_)), "{err:?}");
        assert!(err.to_string().contains(want), "want {want:?} got {err}");
    }
}

#[test]
fn lists_read_from_a_sequence_or_from_documents() {
    let seq = "- {updater_id: a, version: 1.0.0}\n- {updater_id: b, version: 1.0.0, group: dev}\n";
    let docs = "updater_id: a\nversion: 1.0.0\n---\nupdater_id: b\nversion: 1.0.0\ngroup: dev\n";
    let a: Vec<ConnectedAgent> = codec::list_from_text(seq).unwrap();
    let b: Vec<ConnectedAgent> = codec::list_from_text(docs).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[1].group, "dev");
    let err = codec::list_from_text::<ConnectedAgent>("- {updater_id: a}\n").unwrap_err();
    assert!(
        err.to_string().contains("[0]: missing field `version`"),
        "{err}"
    );
    let err = codec::list_from_text::<ConnectedAgent>(
        docs.replace("version: 1.0.0\ngroup", "group").as_str(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("document 2: missing field `version`"),
        "{err}"
    );
}

#[test]
fn a_rollout_round_trips_and_rejects_nonsense() {
    let text = r#"
kind: autoupdate_agent_rollout
metadata: {name: autoupdate-agent-rollout}
spec: {start_version: 1.0.0, target_version: 1.1.0, strategy: time-based, maintenance_window_duration: 90m}
status:
  groups:
  - {name: dev, state: active, config_start_hour: 25, progress: 1.5}
"#;
    let err = AutoUpdateAgentRollout::from_text(text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("status.groups[0].config_start_hour: 25"),
        "{err}"
    );
    assert!(err.contains("status.groups[0].progress: 1.5"), "{err}");
    let ok = text.replace(
        "config_start_hour: 25, progress: 1.5",
        "config_start_hour: 4",
    );
    let r = AutoUpdateAgentRollout::from_text(&ok).unwrap();
    assert_eq!(
        r.spec.maintenance_window_duration.unwrap().to_string(),
        "1h30m"
    );
    let again =
        AutoUpdateAgentRollout::from_text(&codec::to_text(&r, Format::Json).unwrap()).unwrap();
    assert_eq!(again, r);
}

/// A typo at the top (`spce:`) or in the metadata once stored `spec: {}` and replaced
/// the whole config: every level refuses an unknown field, naming it.
#[test]
fn unknown_fields_are_refused_at_every_level_including_the_top() {
    let cases = [
        (
            "kind: autoupdate_config\nspce:\n  agents: {mode: enabled}\n",
            "spce: unknown field `spce`",
        ),
        (
            "kind: autoupdate_config\nmetdata: {name: autoupdate-config}\nspec: {}\n",
            "metdata: unknown field `metdata`",
        ),
        (
            "kind: autoupdate_config\nmetadata: {name: autoupdate-config, lables: {a: b}}\nspec: {}\n",
            "metadata.lables: unknown field `lables`",
        ),
    ];
    for (text, want) in cases {
        let err = AutoUpdateConfig::from_text(text).unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?}\n got {err:?}");
    }
    let err = AutoUpdateVersion::from_text(
        "kind: autoupdate_version\nspce:\n  agents: {target_version: 1.2.3}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("spce: unknown field `spce`"), "{err}");
    // The JSON form goes through the same parser.
    let err = AutoUpdateConfig::from_text(r#"{"kind":"autoupdate_config","spce":{}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("spce: unknown field `spce`"), "{err}");
}

/// 40k levels of `[` in 600 KB once cost the server seconds to minutes of CPU in the
/// YAML parser: a text deeper than `codec::MAX_DEPTH` is refused before parsing, with
/// the line, in JSON and in YAML form alike.
#[test]
fn deeply_nested_texts_are_refused_before_parsing() {
    let n = 40_000;
    let json = format!(
        "{{\"kind\":\"autoupdate_config\",\"spec\":{}{}}}",
        "[".repeat(n),
        "]".repeat(n)
    );
    let yaml = format!(
        "kind: autoupdate_config\nspec:\n  agents:\n{}x\n",
        "- ".repeat(n)
    );
    for text in [json, yaml] {
        let err = AutoUpdateConfig::from_text(&text).unwrap_err().to_string();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
        let err = codec::list_from_text::<AutoUpdateConfig>(&text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nested deeper than 64 levels"), "{err}");
    }
    // Every example of the repository nests far less.
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples")).unwrap()
    {
        let dir = entry.unwrap().path();
        for file in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml" || e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                let err = codec::list_from_text::<serde_json::Value>(&text).err();
                assert!(
                    !err.as_ref()
                        .is_some_and(|e| e.to_string().contains("nested deeper")),
                    "{}: {err:?}",
                    path.display()
                );
            }
        }
    }
}

const WINDOWS_CONFIG: &str = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 2h
    schedules:
      regular:
      - name: paris
        timezone: Europe/Paris
        windows:
        - {days: [Mon, Tue], start: "22:30", duration: 3h}
        - {days: ["*"], start: "06:00"}
        blackouts: ["2026-12-24/2027-01-02", "2027-05-01"]
      - name: legacy
        days: [Wed]
        start_hour: 4
      - name: legacy-zoned
        days: [Thu]
        start_hour: 5
        timezone: America/New_York
"#;

#[test]
fn a_config_with_windows_a_zone_and_blackouts_reads_and_round_trips() {
    let c = AutoUpdateConfig::from_text(WINDOWS_CONFIG).unwrap();
    let groups = c.groups();
    let paris = &groups[0];
    assert_eq!(paris.timezone.as_deref(), Some("Europe/Paris"));
    assert_eq!(paris.windows.len(), 2);
    assert_eq!(paris.windows[0].start.to_string(), "22:30");
    assert_eq!(paris.windows[0].duration.unwrap().to_string(), "3h");
    assert_eq!(paris.windows[1].duration, None, "the strategy's length");
    assert!(paris.days.is_empty(), "no workweek default next to windows");
    assert_eq!(paris.blackouts[0].to_string(), "2026-12-24/2027-01-02");
    assert_eq!(paris.blackouts[1].to_string(), "2027-05-01");
    // The old form stays the old form; a zone on it makes it the new one.
    assert_eq!(groups[1].calendar_spec(), None);
    let zoned = groups[2].calendar_spec().unwrap();
    assert_eq!(zoned.windows[0].start.to_string(), "05:00");
    assert_eq!(zoned.timezone.as_deref(), Some("America/New_York"));
    for format in [Format::Yaml, Format::Json] {
        let text = codec::to_text(&c, format).unwrap();
        assert_eq!(AutoUpdateConfig::from_text(&text).unwrap(), c, "{text}");
    }
    let yaml = codec::to_text(&c, Format::Yaml).unwrap();
    assert!(
        yaml.contains("start: 22:30") || yaml.contains("start: '22:30'"),
        "{yaml}"
    );
    // An unquoted HH:MM reads the same (YAML 1.2 has no sexagesimal numbers).
    let unquoted = WINDOWS_CONFIG.replace("\"22:30\"", "22:30");
    assert_eq!(AutoUpdateConfig::from_text(&unquoted).unwrap(), c);
}

#[test]
fn invalid_schedules_name_the_field_and_the_value() {
    let group =
        |fields: &str| format!("    schedules:\n      regular:\n      - {{name: dev, {fields}}}\n");
    let cases = [
        (
            group("days: [Mon], windows: [{days: [Tue], start: '10:00'}]"),
            "spec.agents.schedules.regular[0].days: [Mon] cannot be set with windows",
        ),
        (
            group("start_hour: 4, windows: [{days: [Tue], start: '10:00'}]"),
            "spec.agents.schedules.regular[0].start_hour: 4 cannot be set with windows",
        ),
        (
            group("timezone: Europe/Pariss"),
            "spec.agents.schedules.regular[0].timezone: \"Europe/Pariss\" is not an IANA time zone",
        ),
        (
            group("blackouts: ['2027-01-02/2026-12-24']"),
            "spec.agents.schedules.regular[0].blackouts[0]: \"2027-01-02/2026-12-24\" ends before it starts",
        ),
        (
            group("blackouts: ['2026-12-24', 'Christmas']"),
            "spec.agents.schedules.regular[0].blackouts[1]: \"Christmas\" is not a date or a range of dates",
        ),
        (
            group("blackouts: ['2026-02-30']"),
            "spec.agents.schedules.regular[0].blackouts[0]: \"2026-02-30\" names a day that does not exist",
        ),
        (
            group("windows: [{days: [Tue], start: '25:00'}]"),
            "spec.agents.schedules.regular[0].windows[0].start: \"25:00\" is not a time of day",
        ),
        (
            group("windows: [{days: [Tue], start: '10:00', duration: 25h}]"),
            "spec.agents.schedules.regular[0].windows[0].duration: 25h is out of range, expected 10m to 24h",
        ),
        (
            group("windows: [{days: [], start: '10:00'}]"),
            "spec.agents.schedules.regular[0].windows[0].days: [] must name at least one day",
        ),
        (
            group("windows: [{days: [Tue]}]"),
            "spec.agents.schedules.regular[0].windows[0]: missing field `start`",
        ),
        (
            group("windows: [{days: [Tue], start: '10:00', start_hour: 3}]"),
            "spec.agents.schedules.regular[0].windows[0].start_hour: unknown field `start_hour`",
        ),
    ];
    let many: Vec<String> = (0..367)
        .map(|d| {
            let day = jiff::civil::date(2027, 1, 1)
                .checked_add(jiff::Span::new().days(d))
                .unwrap();
            format!("'{day}'")
        })
        .collect();
    let too_many = (
        group(&format!("blackouts: [{}]", many.join(", "))),
        "spec.agents.schedules.regular[0].blackouts: (367 entries) are too many, expected at most 366",
    );
    for (yaml, want) in cases.into_iter().chain([too_many]) {
        let err = config_error(&yaml);
        assert!(err.contains(want), "want {want:?}\n got {err:?}");
    }
}

#[test]
fn a_rollout_with_an_unknown_zone_is_refused_naming_it() {
    let text = r#"
kind: autoupdate_agent_rollout
spec: {start_version: 1.0.0, target_version: 1.1.0}
status:
  groups:
  - {name: dev, config_windows: [{days: [Mon], start: "10:00"}], config_timezone: Mars/Olympus}
"#;
    let err = AutoUpdateAgentRollout::from_text(text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("status.groups[0].config_timezone: \"Mars/Olympus\" is not an IANA time zone"),
        "{err}"
    );
}
