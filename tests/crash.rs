//! Crash safety of the store behind the API: a burst of concurrent writes, SIGKILL at a random
//! moment in the middle of it, restart on the same data dir. Every write the API acknowledged
//! with 2xx must survive with its resourceVersion, new writes must get larger resourceVersions
//! than anything before the crash, and a watch from a pre-crash resourceVersion must replay every
//! acknowledged later write.

use aloft_tests::*;
use rand::Rng;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TASKS: usize = 4;
const WRITES_PER_TASK: usize = 200;

/// One acknowledged write.
#[derive(Debug, Clone)]
struct Ack {
    name: String,
    rv: u64,
    /// The value of the `seq` label this write set (its sequence number within its task).
    seq: usize,
    created: bool,
}

/// Writer `t`: creates its objects and updates them in turn (PUT with the last seen
/// resourceVersion, or merge PATCH), recording each 2xx. Stops at the first transport error
/// (the coordinator died) or after its quota.
async fn writer(admin: Client, t: usize, acks: Arc<Mutex<Vec<Ack>>>, count: Arc<AtomicUsize>) {
    let objects = 10;
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for seq in 0..WRITES_PER_TASK {
        let name = format!("crash-{t}-{}", seq % objects);
        let result = match last.get(&name) {
            None => {
                let mut mc = machine_config(&name, "worker");
                mc["metadata"]["labels"]["seq"] = seq.to_string().into();
                admin.post(&path_of(&MACHINE_CONFIG, None), &mc).await.map(|r| (r, true))
            }
            Some(prev) if seq % 2 == 0 => {
                let mut next = prev.clone();
                next["metadata"]["labels"]["seq"] = seq.to_string().into();
                next["spec"]["kernelArguments"] = json!([format!("seq={seq}")]);
                admin.put(&path_of(&MACHINE_CONFIG, Some(&name)), &next).await.map(|r| (r, false))
            }
            Some(_) => admin
                .patch(
                    &path_of(&MACHINE_CONFIG, Some(&name)),
                    "application/merge-patch+json",
                    &json!({"metadata": {"labels": {"seq": seq.to_string()}}}),
                )
                .await
                .map(|r| (r, false)),
        };
        let Ok((reply, created)) = result else { return };
        if !reply.ok() {
            // A 5xx while the process dies is possible; anything else is a test bug.
            assert!(reply.code >= 500, "writer {t} seq {seq}: unexpected {}: {}", reply.code, reply.body);
            return;
        }
        let rv = rv(&reply.body);
        assert_eq!(reply.body["metadata"]["labels"]["seq"], seq.to_string(), "the answer is the write");
        acks.lock().unwrap().push(Ack { name: name.clone(), rv, seq, created });
        last.insert(name, reply.body);
        count.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill() {
    let mut c = Coordinator::start();
    let admin = c.client();
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let total = TASKS * WRITES_PER_TASK;
    let kill_at = rand::rng().random_range(total / 8..total * 3 / 4);
    eprintln!("killing the coordinator after {kill_at} of {total} acknowledged writes");

    let handles: Vec<_> =
        (0..TASKS).map(|t| tokio::spawn(writer(admin.clone(), t, acks.clone(), count.clone()))).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::SeqCst) < kill_at {
        assert!(tokio::time::Instant::now() < deadline, "the burst stalled at {} writes", count.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    c.kill9();
    for h in handles {
        h.await.expect("writer task");
    }
    let acks = acks.lock().unwrap().clone();
    let acked = acks.len();
    assert!(acked >= kill_at && acked < total, "the kill landed mid-burst: {acked} of {total} acknowledged");

    c.restart();
    let admin = c.client();

    // Every acknowledged write is there: per object, the last acknowledged write, or a later one.
    let mut last_ack: BTreeMap<&str, &Ack> = BTreeMap::new();
    for a in &acks {
        let e = last_ack.entry(a.name.as_str()).or_insert(a);
        if a.rv > e.rv {
            *e = a;
        }
    }
    let max_acked = acks.iter().map(|a| a.rv).max().expect("some writes were acknowledged");
    let mut max_seen = 0;
    for (name, a) in &last_ack {
        let r = admin.get(&path_of(&MACHINE_CONFIG, Some(name))).await.unwrap();
        assert_eq!(r.code, 200, "acknowledged object {name} (rv {}) is lost after the crash: {}", a.rv, r.body);
        let got = rv(&r.body);
        max_seen = max_seen.max(got);
        assert!(got >= a.rv, "{name}: stored resourceVersion {got} is older than the acknowledged {}", a.rv);
        let seq: usize = r.body["metadata"]["labels"]["seq"].as_str().unwrap().parse().unwrap();
        if got == a.rv {
            assert_eq!(seq, a.seq, "{name}: at the acknowledged resourceVersion the content is the acknowledged write");
        } else {
            assert!(seq > a.seq, "{name}: a newer resourceVersion holds a newer write (seq {seq} > {})", a.seq);
        }
    }
    let listed = list_names(&admin, &MACHINE_CONFIG).await;
    for name in last_ack.keys() {
        assert!(listed.iter().any(|n| n == name), "{name} is listed after restart");
    }

    // New writes continue the revision sequence.
    let r = admin.post(&path_of(&MACHINE_CONFIG, None), &machine_config("after-crash", "worker")).await.unwrap();
    assert_eq!(r.code, 201, "{}", r.body);
    let new_rv = rv(&r.body);
    assert!(
        new_rv > max_acked && new_rv > max_seen,
        "post-crash write rv {new_rv} > every earlier rv ({max_acked}, {max_seen})"
    );

    // A watch from a pre-crash revision replays every acknowledged later write, in order.
    let mut sorted = acks.clone();
    sorted.sort_by_key(|a| a.rv);
    let from = sorted[sorted.len() / 3].rv;
    let expected: Vec<&Ack> = sorted.iter().filter(|a| a.rv > from).collect();
    let mut w =
        WatchStream::open(&admin, &format!("{}?watch=true&resourceVersion={from}", path_of(&MACHINE_CONFIG, None)))
            .await
            .unwrap();
    let mut seen: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut prev = from;
    loop {
        let ev = w.next(Duration::from_secs(10)).await.unwrap().expect("watch open");
        let r = rv(&ev["object"]);
        assert!(r > prev, "watch events strictly increase: {r} after {prev}");
        prev = r;
        let name = ev["object"]["metadata"]["name"].as_str().unwrap().to_string();
        seen.insert(r, (ev["type"].as_str().unwrap().to_string(), name));
        if r >= new_rv {
            break;
        }
    }
    for a in expected {
        let (ty, name) =
            seen.get(&a.rv).unwrap_or_else(|| panic!("acknowledged write {a:?} is missing from the replay"));
        assert_eq!(name, &a.name, "replayed event at rv {} names the acknowledged object", a.rv);
        assert_eq!(ty, if a.created { "ADDED" } else { "MODIFIED" }, "{a:?}");
    }
    assert_eq!(seen.get(&new_rv).map(|(t, n)| (t.as_str(), n.as_str())), Some(("ADDED", "after-crash")));
}
