//! The coordinator process's own series on `/metrics`: CPU, memory, file descriptors, and what
//! the memory allocator holds.
//!
//! Why: a coordinator serves a fleet for months, and its operator must be able to tell a
//! coordinator that grows from one that has settled, and a leak from memory the allocator keeps
//! for reuse. The `process_*` series are the ones every Prometheus client library exports (and
//! kube-apiserver with them), so a dashboard or alert written for an OpenShift control plane,
//! such as one on `process_resident_memory_bytes`, reads aloft unchanged. Go's runtime adds
//! `go_memstats_*` beside them; aloft's counterpart is `aloft_allocator_bytes{kind}`, read from
//! the allocator the binary chose ([`AllocatorProbe`]): its `allocated` is what the program
//! holds, and the distance from there to `resident` is what the allocator keeps.
//!
//! Everything is read at scrape time; what cannot be read (no `/proc`, no allocator statistics)
//! is left out of the scrape rather than failing it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Bytes by kind, as the allocator counts them (jemalloc's `stats.*`).
///
/// Why these: `allocated` grows only with live data; `active` and `resident` add what the
/// allocator keeps in its pages; `retained` is address space given back to the kernel but kept
/// mapped for reuse (not in RSS). A resident that climbs while allocated stays flat is the
/// allocator's, not a leak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes the program has allocated and not freed.
    pub allocated: u64,
    /// Bytes in the pages that hold allocations (allocated plus the free space between them).
    pub active: u64,
    /// Bytes of the allocator's pages resident in memory (its share of the process's RSS).
    pub resident: u64,
    /// Bytes mapped by the allocator and in use by it.
    pub mapped: u64,
    /// Bytes unmapped from use but kept as address space for later.
    pub retained: u64,
    /// Bytes of the allocator's own bookkeeping.
    pub metadata: u64,
}

/// Reads the process's allocator; `None` when it cannot say. A library cannot know which global
/// allocator the binary linked, so the binary passes this in (`ServeOptions::allocator`).
pub type AllocatorProbe = fn() -> Option<AllocatorStats>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// What `/proc/self` says of the process, in the units of Prometheus' process collector.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    start_time_seconds: f64,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

fn read_process() -> Result<ProcessStats, procfs::ProcError> {
    let me = procfs::process::Process::myself()?;
    let stat = me.stat()?;
    let ticks = procfs::ticks_per_second() as f64;
    let boot = procfs::boot_time_secs()? as f64;
    let max_fds = me.limits().ok().and_then(|l| match l.max_open_files.soft_limit {
        procfs::process::LimitValue::Value(n) => Some(n),
        procfs::process::LimitValue::Unlimited => None,
    });
    Ok(ProcessStats {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_bytes: stat.rss * procfs::page_size(),
        virtual_bytes: stat.vsize,
        start_time_seconds: boot + stat.starttime as f64 / ticks,
        open_fds: me.fd_count().ok().map(|n| n as u64),
        max_fds,
    })
}

fn gauge(v: u64) -> Gauge {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    g
}

fn register_process(registry: &mut Registry, p: &ProcessStats) {
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(p.cpu_seconds);
    registry.register("process_cpu_seconds", "Total user and system CPU time spent in seconds", cpu);
    registry.register("process_resident_memory_bytes", "Resident memory size in bytes", gauge(p.resident_bytes));
    registry.register("process_virtual_memory_bytes", "Virtual memory size in bytes", gauge(p.virtual_bytes));
    let start = Gauge::<f64, AtomicU64>::default();
    start.set(p.start_time_seconds);
    registry.register("process_start_time_seconds", "Start time of the process since unix epoch in seconds", start);
    if let Some(n) = p.open_fds {
        registry.register("process_open_fds", "Number of open file descriptors", gauge(n));
    }
    if let Some(n) = p.max_fds {
        registry.register("process_max_fds", "Maximum number of open file descriptors", gauge(n));
    }
}

fn register_allocator(registry: &mut Registry, a: &AllocatorStats) {
    let family = Family::<KindLabels, Gauge>::default();
    for (kind, v) in [
        ("allocated", a.allocated),
        ("active", a.active),
        ("resident", a.resident),
        ("mapped", a.mapped),
        ("retained", a.retained),
        ("metadata", a.metadata),
    ] {
        family.get_or_create(&KindLabels { kind }).set(i64::try_from(v).unwrap_or(i64::MAX));
    }
    registry.register(
        "aloft_allocator_bytes",
        "Bytes the memory allocator counts, by kind: allocated (live data), active, resident, mapped, \
         retained (unmapped, kept as address space), metadata",
        family,
    );
}

/// Add the process's series, and the allocator's when `allocator` can read it.
pub fn register(registry: &mut Registry, allocator: Option<AllocatorProbe>) {
    match read_process() {
        Ok(p) => register_process(registry, &p),
        Err(e) => tracing::debug!(error = %e, "process metrics left out: /proc/self could not be read"),
    }
    if let Some(a) = allocator.and_then(|probe| probe()) {
        register_allocator(registry, &a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).expect("encode");
        out
    }

    fn value(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line[series.len()..].trim().parse().expect("a number")
    }

    #[test]
    fn the_process_is_read_from_proc() {
        // Hold a few descriptors open so the count has something to see.
        let files: Vec<_> = (0..3).map(|_| tempfile::tempfile().expect("tempfile")).collect();
        let busy = std::time::Instant::now();
        while busy.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        let mut registry = Registry::default();
        register(&mut registry, None);
        let text = encode(&registry);
        assert!(value(&text, "process_cpu_seconds_total") > 0.0, "{text}");
        let rss = value(&text, "process_resident_memory_bytes");
        assert!(rss > 1e6, "a test process holds more than 1 MB: {rss}");
        assert!(value(&text, "process_virtual_memory_bytes") >= rss);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        let start = value(&text, "process_start_time_seconds");
        assert!(start <= now + 1.0 && start > now - 86_400.0, "started within a day: {start} vs {now}");
        assert!(value(&text, "process_open_fds") >= files.len() as f64);
        assert!(value(&text, "process_max_fds") >= value(&text, "process_open_fds"));
        assert!(!text.contains("aloft_allocator_bytes"), "no probe, no allocator series");
    }

    #[test]
    fn the_allocator_is_read_from_the_probe() {
        fn probe() -> Option<AllocatorStats> {
            Some(AllocatorStats { allocated: 10, active: 20, resident: 30, mapped: 40, retained: 50, metadata: 5 })
        }
        fn blind() -> Option<AllocatorStats> {
            None
        }
        let mut registry = Registry::default();
        register(&mut registry, Some(probe));
        let text = encode(&registry);
        for (kind, v) in [
            ("allocated", 10.0),
            ("active", 20.0),
            ("resident", 30.0),
            ("mapped", 40.0),
            ("retained", 50.0),
            ("metadata", 5.0),
        ] {
            assert_eq!(value(&text, &format!("aloft_allocator_bytes{{kind=\"{kind}\"}}")), v, "{text}");
        }
        let mut registry = Registry::default();
        register(&mut registry, Some(blind));
        let text = encode(&registry);
        assert!(!text.contains("aloft_allocator_bytes"), "{text}");
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }
}
