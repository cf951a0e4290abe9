//! The FleetLock protocol (Zincati's `fleet_lock` strategy, as airlock serves it) against a real
//! coordinator on loopback: the requests Zincati sends (`POST /v1/pre-reboot` and
//! `/v1/steady-state` with `fleet-lock-protocol: true` and its `client_params`), a counting
//! semaphore re-entrant per host, the holders shown by `aloftctl get fleetlocks` and freed by an
//! admin's patch of the status, hosts racing for the last slots, and bad requests refused with
//! the protocol's `{kind, value}`, changing nothing.

use aloft_tests::*;
use serde_json::{json, Value};

const FLEETLOCKS: &str = "/apis/aloft.dev/v1/fleetlocks";

/// A FleetLock request as Zincati sends it: the code and the body (null when not JSON).
async fn lock(http: &reqwest::Client, base: &str, op: &str, id: &str, group: &str) -> (u16, Value) {
    let r = http
        .post(format!("{base}/v1/{op}"))
        .header("fleet-lock-protocol", "true")
        .json(&json!({"client_params": {"id": id, "group": group}}))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    (code, r.json::<Value>().await.unwrap_or(Value::Null))
}

async fn holders(c: &Client, group: &str) -> Vec<String> {
    let l = c.get(&format!("{FLEETLOCKS}/{group}")).await.unwrap().into_result().unwrap();
    l.pointer("/status/holders")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|h| h["id"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// `aloftctl ARGS` against `c`; it must succeed; its stdout.
fn aloftctl(c: &Coordinator, args: &[&str]) -> String {
    let out = c.aloftctl(args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "aloftctl {args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn fleet_lock(name: &str, max: i64) -> Value {
    json!({"apiVersion": "aloft.dev/v1", "kind": "FleetLock", "metadata": {"name": name}, "spec": {"maxHolders": max}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetlock_hands_out_reboot_slots_and_shows_who_holds_them() {
    let port = free_port();
    let c = Coordinator::start_with(Options {
        args: vec!["--fleetlock-listen".into(), format!("127.0.0.1:{port}")],
        ..Default::default()
    });
    let admin = c.client();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();

    // A group nobody created: refused, saying how to create it.
    let (code, body) = lock(&http, &base, "pre-reboot", "m1", "default").await;
    assert_eq!((code, body["kind"].as_str()), (404, Some("unknown_group")), "{body}");
    assert!(body["value"].as_str().unwrap().contains("no FleetLock \"default\""), "{body}");

    admin.post(FLEETLOCKS, &fleet_lock("default", 2)).await.unwrap().into_result().unwrap();
    for (id, want) in [("m1", 200), ("m1", 200), ("m2", 200), ("m3", 409)] {
        let (code, body) = lock(&http, &base, "pre-reboot", id, "default").await;
        assert_eq!(code, want, "{id}: {body}");
    }
    let (_, full) = lock(&http, &base, "pre-reboot", "m3", "default").await;
    assert_eq!(full["kind"], "failed_lock", "{full}");
    assert_eq!(full["value"], "all 2 slots of group default held, by m1, m2", "{full}");
    assert_eq!(holders(&admin, "default").await, ["m1", "m2"], "m1's second request took no second slot");
    let l = admin.get(&format!("{FLEETLOCKS}/default")).await.unwrap().into_result().unwrap();
    let since = l["status"]["holders"][0]["since"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(since).is_ok(), "{l}");

    // Who holds the slots, for the operator (airlock shows nobody).
    let table = aloftctl(&c, &["get", "fleetlocks"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(&row[..3], ["default", "2", "m1,m2"], "{table}");
    let taken = eventually(T, "the SlotTaken Events", || async {
        let events = admin.get("/api/v1/events").await?.into_result()?;
        let mut taken: Vec<String> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["kind"] == "FleetLock" && e["reason"] == "SlotTaken")
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect();
        taken.sort();
        Ok((taken.len() == 2).then_some(taken))
    })
    .await;
    assert_eq!(taken, ["Host m1 took a slot to reboot (1 of 2 held)", "Host m2 took a slot to reboot (2 of 2 held)"]);

    // On /metrics: slots held, slots, and how long the longest holder has held one.
    let metrics = aloftctl(&c, &["get", "--raw", "/metrics"]);
    assert!(metrics.contains("aloft_fleetlock_holders{group=\"default\"} 2\n"), "{metrics}");
    assert!(metrics.contains("aloft_fleetlock_max_holders{group=\"default\"} 2\n"), "{metrics}");
    let oldest: i64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("aloft_fleetlock_oldest_hold_seconds{group=\"default\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    let held_for = (chrono::Utc::now()
        - chrono::DateTime::parse_from_rfc3339(since).unwrap().with_timezone(&chrono::Utc))
    .num_seconds();
    assert!((0..=held_for + 1).contains(&oldest), "{oldest} s, m1 has held for {held_for} s");

    // Steady state gives the slot back; a host holding none gets 200 and changes nothing.
    assert_eq!(lock(&http, &base, "steady-state", "m1", "default").await.0, 200);
    assert_eq!(holders(&admin, "default").await, ["m2"]);
    assert_eq!(lock(&http, &base, "pre-reboot", "m3", "default").await.0, 200);
    assert_eq!(lock(&http, &base, "steady-state", "m9", "default").await.0, 200);
    assert_eq!(holders(&admin, "default").await, ["m2", "m3"]);

    // Bad requests: the protocol's error body, nothing changed.
    let before = admin.get(&format!("{FLEETLOCKS}/default")).await.unwrap().into_result().unwrap();
    let no_header = http
        .post(format!("{base}/v1/pre-reboot"))
        .json(&json!({"client_params": {"id": "m4", "group": "default"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_header.status().as_u16(), 400);
    assert_eq!(no_header.json::<Value>().await.unwrap()["kind"], "missing_header");
    let (code, body) = lock(&http, &base, "pre-reboot", "m4", "-default").await;
    assert_eq!((code, body["kind"].as_str()), (400, Some("bad_body")), "{body}");
    assert!(body["value"].as_str().unwrap().starts_with("client_params.group: Invalid value: \"-default\""), "{body}");
    let (code, body) = lock(&http, &base, "pre-reboot", "m4", "de/fault").await;
    assert_eq!((code, body["kind"].as_str()), (400, Some("bad_body")), "{body}");
    let (code, body) = lock(&http, &base, "pre-reboot", "", "default").await;
    assert_eq!((code, body["value"].as_str()), (400, Some("client_params.id: Required value")), "{body}");
    let garbage = http
        .post(format!("{base}/v1/pre-reboot"))
        .header("fleet-lock-protocol", "true")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status().as_u16(), 400);
    let elsewhere = http.post(format!("{base}/v1/reboot")).header("fleet-lock-protocol", "true").send().await.unwrap();
    assert_eq!(elsewhere.status().as_u16(), 404);
    let after = admin.get(&format!("{FLEETLOCKS}/default")).await.unwrap().into_result().unwrap();
    assert_eq!(after, before, "bad requests changed nothing");

    // A host that will not come back: an admin frees its slot with a patch of the status.
    let patch = json!([{"op": "test", "path": "/status/holders/0/id", "value": "m2"},
        {"op": "remove", "path": "/status/holders/0"}]);
    let r = admin.patch(&format!("{FLEETLOCKS}/default/status"), "application/json-patch+json", &patch).await.unwrap();
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(holders(&admin, "default").await, ["m3"]);

    // A group written with capitals (the protocol allows them, Zincati sends the configured
    // group as written) is the FleetLock object of its lowercase name.
    assert_eq!(lock(&http, &base, "steady-state", "m3", "Default").await.0, 200);
    assert_eq!(holders(&admin, "default").await, Vec::<String>::new(), "m3 gave back its slot of \"default\"");

    // A host that reboots again takes and gives back its slot again: each occurrence counts on
    // its Event (the same message, held back as a repeated decision before).
    for _ in 0..2 {
        assert_eq!(lock(&http, &base, "pre-reboot", "m7", "default").await.0, 200);
        assert_eq!(lock(&http, &base, "steady-state", "m7", "default").await.0, 200);
    }
    let counts = eventually(T, "m7's Events counted twice", || async {
        let events = admin.get("/api/v1/events").await?.into_result()?;
        let count = |msg: &str| {
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["involvedObject"]["kind"] == "FleetLock" && e["message"] == msg)
                .map(|e| e["count"].as_i64().unwrap_or(1))
                .sum::<i64>()
        };
        let counts = (count("Host m7 took a slot to reboot (1 of 2 held)"), count("Host m7 gave its slot back"));
        Ok((counts == (2, 2)).then_some(counts))
    })
    .await;
    assert_eq!(counts, (2, 2));

    // Hosts racing for the last slots: exactly as many get one as there are.
    admin.post(FLEETLOCKS, &fleet_lock("race", 3)).await.unwrap().into_result().unwrap();
    let racers: Vec<_> = (0..20)
        .map(|i| {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move { (i, lock(&http, &base, "pre-reboot", &format!("r{i}"), "race").await.0) })
        })
        .collect();
    let mut won = Vec::new();
    for r in racers {
        let (i, code) = r.await.unwrap();
        match code {
            200 => won.push(format!("r{i}")),
            409 => {}
            other => panic!("r{i}: {other}"),
        }
    }
    let mut held = holders(&admin, "race").await;
    held.sort();
    won.sort();
    assert_eq!((won.len(), &held), (3, &won), "the winners are the holders");

    // Admission: a negative number of slots is refused, naming the field.
    let r = admin.post(FLEETLOCKS, &fleet_lock("bad", -1)).await.unwrap();
    assert_status(&r, 422, "Invalid", "maxHolders -1");
    assert_eq!(cause_fields(&r.body), ["spec.maxHolders"]);
}

/// Without `--fleetlock-listen` nothing listens for FleetLock: the API's port does not serve it.
#[tokio::test]
async fn fleetlock_is_off_unless_asked_for() {
    let c = Coordinator::start();
    let admin = c.client();
    let r = admin.post("/v1/pre-reboot", &json!({"client_params": {"id": "m1", "group": "default"}})).await.unwrap();
    assert_eq!(r.code, 404, "{}", r.body);
}

const T: std::time::Duration = std::time::Duration::from_secs(60);
