//! The rule library: data that says which events are root causes, which are symptoms, what class a
//! root belongs to, and what to advise. The code here only loads rules and matches them.

use coroner_model::{Event, FaultClass, ProcessEnd, ProcessEndCause, Role};
use regex::Regex;
use serde::Deserialize;

/// The rules shipped with coroner.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.toml");

/// The rules file format this build reads.
pub const RULES_FORMAT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("rules file is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("rules file has format version {0}; this coroner reads version {RULES_FORMAT_VERSION}")]
    Version(u32),
    #[error("rule {id:?}: {problem}")]
    Rule { id: String, problem: String },
}

#[derive(Debug, Deserialize)]
struct RulesFile {
    version: u32,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    id: String,
    kinds: Vec<String>,
    message: Option<String>,
    role: String,
    class: Option<String>,
    confidence: Option<f64>,
    summary: Option<String>,
    advice: Option<String>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub id: String,
    kinds: Vec<String>,
    message: Option<Regex>,
    pub role: Role,
    pub class: Option<FaultClass>,
    pub confidence: f64,
    pub summary: Option<String>,
    pub advice: Option<String>,
}

/// What the rules say about one event.
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'r> {
    pub rule: Option<&'r Rule>,
    pub role: Role,
}

impl Verdict<'_> {
    pub fn class(&self) -> Option<FaultClass> {
        self.rule.and_then(|r| r.class)
    }
    pub fn confidence(&self) -> f64 {
        self.rule.map(|r| r.confidence).unwrap_or(0.0)
    }
}

/// An ordered list of rules; the first match wins.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// The rules shipped with coroner.
    pub fn builtin() -> RuleSet {
        // The shipped file is tested below; failing here would be a build defect, not bad input.
        RuleSet::parse(DEFAULT_RULES).expect("the shipped rules file is valid")
    }

    /// Parses a rules file.
    pub fn parse(text: &str) -> Result<RuleSet, RulesError> {
        let file: RulesFile = toml::from_str(text)?;
        if file.version != RULES_FORMAT_VERSION {
            return Err(RulesError::Version(file.version));
        }
        let rules = file.rules.into_iter().map(compile).collect::<Result<Vec<_>, _>>()?;
        Ok(RuleSet { rules })
    }

    /// The user's rules first, then the shipped ones.
    pub fn with_overrides(user: RuleSet) -> RuleSet {
        let mut rules = user.rules;
        rules.extend(RuleSet::builtin().rules);
        RuleSet { rules }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }

    /// Classifies an event.
    pub fn classify(&self, event: &Event) -> Verdict<'_> {
        self.classify_parts(event.kind.name(), &event.kind.message())
    }

    /// Classifies how a process ended, as the pseudo-event `process_end`.
    pub fn classify_end(&self, end: &ProcessEnd) -> Verdict<'_> {
        let message = match end.cause() {
            ProcessEndCause::Success => "exit 0".to_string(),
            ProcessEndCause::ExitCode(c) => format!("exit {c}"),
            ProcessEndCause::Signal(s) => format!("signal {s}"),
            ProcessEndCause::Unknown => "unknown".to_string(),
        };
        self.classify_parts("process_end", &message)
    }

    fn classify_parts(&self, kind: &str, message: &str) -> Verdict<'_> {
        let rule = self.rules.iter().find(|r| r.kinds.iter().any(|k| k == kind) && r.message.as_ref().is_none_or(|re| re.is_match(message)));
        Verdict { rule, role: rule.map(|r| r.role).unwrap_or(Role::Noise) }
    }
}

fn compile(spec: RuleSpec) -> Result<Rule, RulesError> {
    let bad = |problem: String| RulesError::Rule { id: spec.id.clone(), problem };
    let role = match spec.role.as_str() {
        "root" => Role::Root,
        "symptom" => Role::Symptom,
        "progress" => Role::Progress,
        "noise" => Role::Noise,
        other => return Err(bad(format!("unknown role {other:?} (root, symptom, progress, noise)"))),
    };
    let class = match &spec.class {
        Some(c) => Some(FaultClass::parse(c).ok_or_else(|| bad(format!("unknown class {c:?}")))?),
        None if role == Role::Root => return Err(bad("a root rule needs a class".to_string())),
        None => None,
    };
    let message = match &spec.message {
        Some(m) => Some(Regex::new(m).map_err(|e| bad(format!("bad message regex: {e}")))?),
        None => None,
    };
    if spec.kinds.is_empty() {
        return Err(bad("kinds is empty".to_string()));
    }
    let confidence = spec.confidence.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&confidence) {
        return Err(bad(format!("confidence {confidence} is outside 0..1")));
    }
    Ok(Rule { id: spec.id, kinds: spec.kinds, message, role, class, confidence, summary: spec.summary, advice: spec.advice })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_rules_load_and_cover_every_failure_class() {
        let rules = RuleSet::builtin();
        for class in FaultClass::ALL {
            if matches!(class, FaultClass::None | FaultClass::Hang) {
                continue; // success and hangs are decided from progress, not from a line
            }
            assert!(rules.rules.iter().any(|r| r.class == Some(class) && r.advice.is_some()), "no rule with advice for {class}");
        }
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_named() {
        let err = RuleSet::parse("version = 1\n[[rule]]\nid = \"x\"\nkinds = [\"exception\"]\nrole = \"root\"\n").unwrap_err();
        assert!(err.to_string().contains("\"x\""), "{err}");
        let err = RuleSet::parse("version = 2\n").unwrap_err();
        assert!(matches!(err, RulesError::Version(2)));
        let err = RuleSet::parse("version = 1\n[[rule]]\nid = \"y\"\nkinds = [\"exception\"]\nmessage = \"(\"\nrole = \"noise\"\n").unwrap_err();
        assert!(err.to_string().contains("regex"), "{err}");
    }

    #[test]
    fn each_frameworks_wording_of_a_fault_gets_its_class() {
        let rules = RuleSet::builtin();
        let class = |kind: &str, message: &str| rules.classify_parts(kind, message).class();
        let oom = Some(FaultClass::CudaOom);
        // vLLM V1's start-up check, XLA's allocator status, TF/XLA's status hard-wrapped after `Out`.
        assert_eq!(
            class("error_line", "ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than desired GPU memory utilization (0.9, 3.6 GiB)."),
            oom
        );
        assert_eq!(class("error_line", "Original error: RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0"), oom);
        assert_eq!(class("error_line", "Execution of replica 0 failed: Resource exhausted: Out"), oom);
        assert_eq!(class("exception", "ray.exceptions.RayTaskError(OutOfMemoryError): ray::Runner.run() (pid=104449)"), oom);
        assert_eq!(
            class("error_line", "BaseCollectiveExecutor::StartAbort Invalid argument: var and grad do not have the same shape[2,1536] [512,1536]"),
            Some(FaultClass::ShapeMismatch)
        );
        // Not reaching the rendezvous store at all is a communication failure of its own; a store
        // that went away later is a symptom.
        for m in [
            "[c10d] The client socket has timed out after 60s while trying to connect to (IP1, 2222).",
            "torch.distributed.DistNetworkError: The client socket has timed out after 300000ms while trying to connect to (036c56dce41b, 41331).",
            "RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.",
        ] {
            let v = rules.classify_parts(if m.starts_with('[') { "store_error" } else { "exception" }, m);
            assert_eq!((v.role, v.class()), (Role::Root, Some(FaultClass::NcclError)), "{m}");
        }
        assert_eq!(rules.classify_parts("store_error", "[c10d] recvValue failed on SocketImpl: Connection reset by peer").role, Role::Symptom);
        // NCCL's own connect giving up after its retries, also when the paste cut the address off.
        for m in ["Connect to 10.1.2.3<43127> failed : Connection timed out", "socketStartConnect: Connect to", "Connect to"] {
            assert_eq!(rules.classify_parts("nccl_warn", m).class(), Some(FaultClass::NcclError), "{m}");
        }
        // A traceback cut before its exception line is a failure, except the launcher's own
        // re-raise and a collective call's (the collective failed; its peers say why).
        let cut = |file: &str| rules.classify_parts("error_line", &format!("a traceback cut before its exception line, last frame f ({file})")).role;
        let launchers =
            "the launcher's own traceback (its report of a failed worker) cut before its exception line, last frame main (x/torch/distributed/launch.py)";
        assert_eq!(rules.classify_parts("error_line", launchers).role, Role::Symptom);
        assert_eq!(cut("/usr/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py"), Role::Symptom);
        assert_eq!(cut("/home/u/train.py"), Role::Root);
        // A CUDA error thrown from C++ with no Python frame to catch it aborts the process (the
        // `terminate called ... what():` pair); raised into Python it stays an exception.
        assert_eq!(class("error_line", "c10::Error: CUDA error: initialization error"), Some(FaultClass::Segfault));
        assert_eq!(class("exception", "RuntimeError: CUDA error: initialization error"), Some(FaultClass::PythonException));
        // Loading a checkpoint that does not fit: raised inside load_state_dict, or accelerate's
        // loader refusing a weight of another shape.
        let ckpt = Some(FaultClass::CheckpointMismatch);
        assert_eq!(class("error_line", "raised while loading a state_dict into the model (load_state_dict): RuntimeError: inconsistent tensor size"), ckpt);
        assert_eq!(class("exception", "ValueError: Trying to set a tensor of shape torch.Size([152064, 3584]) in \"weight\""), ckpt);
    }

    #[test]
    fn tpu_tf_collective_check_and_host_memory_wordings_get_their_class() {
        let rules = RuleSet::builtin();
        let class = |kind: &str, message: &str| rules.classify_parts(kind, message).class();
        // The TPU driver's own fatal error and its interrupt.
        assert_eq!(
            class("error_line", "[/dev/accel3 tpu77:pe0:3] !!!! FATAL ERROR !!!! for [/dev/accel3 tpu77:pe0:3] , fatal_error: true"),
            Some(FaultClass::GpuHardware)
        );
        assert_eq!(class("error_line", "Received Error Interrupt! fatal: true, running_timer: 0x1"), Some(FaultClass::GpuHardware));
        // TensorFlow collectives whose members disagree about the group or the sender.
        let cm = Some(FaultClass::CollectiveMismatch);
        assert_eq!(class("error_line", "Collective ops is aborted by: Device /job:worker/replica:0/task:1/device:GPU:0 is joining a group with size 4, but that group has size 2 (group_key=3)"), cm);
        assert_eq!(class("error_line", "BaseCollectiveExecutor::StartAbort Internal: Instance 7 found no source for broadcast.  This could mean that there were group_size=4 BcastRecvs but no BcastSend."), cm);
        // A glog CHECK aborts the process; an XLA RET_CHECK is a returned status, not a CHECK.
        assert_eq!(class("error_line", "Check failed: s.ok() copy tensor to gpu sync"), Some(FaultClass::Segfault));
        // absl's CHECK_OK says the status it refused.
        assert_eq!(class("error_line", "Non-OK-status: status status: INTERNAL: stream did not block host until done"), Some(FaultClass::Segfault));
        assert_ne!(class("error_line", "INTERNAL: RET_CHECK failure (xla/service/gpu/gpu_compiler.cc:618) dnn != nullptr"), Some(FaultClass::Segfault));
        // Host memory: Rust's allocator giving up; a TPU worker that stopped answering.
        assert_eq!(class("error_line", "memory allocation of 4194304 bytes failed"), Some(FaultClass::Killed));
        // TPU memory as XLA words it when reserving or compiling.
        let oom = Some(FaultClass::CudaOom);
        assert_eq!(class("error_line", "(1) RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. That was not possible."), oom);
        assert_eq!(
            class(
                "exception",
                "XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm."
            ),
            oom
        );
        // A collective aborted for an unreachable peer; an RDMA completion that failed, also in a CHECK.
        let net = Some(FaultClass::NcclError);
        assert_eq!(class("error_line", "Aborting RingReduce with Unavailable: OS Error"), net);
        assert_eq!(class("error_line", "BaseCollectiveExecutor::StartAbort Unavailable: OS Error"), net);
        assert_eq!(class("error_line", "Check failed: wc->status == IBV_WC_SUCCESS RC send CQ state error: 12, 0"), net);
        assert_eq!(class("error_line", "Check failed: s.ok() copy tensor to gpu sync"), Some(FaultClass::Segfault));
        // TensorFlow: a collective past its deadline is a symptom, its gRPC server's refusal to
        // stop cleanly at exit is noise; an MPI call that failed is the communication layer.
        assert_eq!(rules.classify_parts("error_line", "BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded").role, Role::Symptom);
        assert_eq!(
            rules.classify_parts("error_line", "Non-OK-status: Stop() status: UNIMPLEMENTED: Clean shutdown is not currently implemented").role,
            Role::Noise
        );
        assert_eq!(
            class("error_line", "tensorrt_llm::common::TllmException: [TensorRT-LLM][ERROR] Assertion failed: Failed: MPI error mpiUtils.cpp:211 '6'"),
            net
        );
        // torch.distributed.checkpoint's own wording of a shape that does not fit.
        assert_eq!(
            class("exception", "ValueError: Size mismatch between saved torch.Size([257152, 2048]) and current: torch.Size([131661824]) for fsdp_checkpoint.model.embed_tokens.weight"),
            Some(FaultClass::CheckpointMismatch)
        );
        // An uncaught C++ exception aborts; the watchdog's own (DistBackendError) is its symptom.
        assert_eq!(class("error_line", "terminate called after throwing an instance of 'std::runtime_error'"), Some(FaultClass::Segfault));
        let watchdog = rules.classify_parts("error_line", "terminate called after throwing an instance of 'c10::DistBackendError'");
        assert_eq!((watchdog.role, watchdog.class()), (Role::Symptom, None));
        // CUDA's error 802: the NVSwitch fabric (its manager) not ready.
        assert_eq!(
            class("exception", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized"),
            Some(FaultClass::GpuHardware)
        );
        // A crash handler dumping core (absl's, Google's coredump hook).
        assert_eq!(class("error_line", "RAW: Dumping core locally."), Some(FaultClass::Segfault));
        // The closing advice of Ray's memory monitor's report, its head truncated away.
        let ray = "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node";
        assert_eq!(class("error_line", ray), Some(FaultClass::Killed));
        assert_eq!(
            class("error_line", "ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:2/device:CPU:0)"),
            Some(FaultClass::Killed)
        );
    }

    #[test]
    fn a_bus_error_is_its_own_class_whoever_reports_it() {
        let rules = RuleSet::builtin();
        let bus = Some(FaultClass::BusError);
        let end = ProcessEnd { rank: coroner_model::Rank(3), exit_code: Some(-7), signal: None, at_ns: None };
        assert_eq!(rules.classify_end(&end).class(), bus, "torchrun's exitcode -7");
        assert_eq!(rules.classify_parts("fatal_signal", "Fatal Python error: Bus error").class(), bus);
        for line in [
            "Bus error (core dumped)",
            "[gpu-node-7:12345:0:12345] Caught signal 7 (Bus error: nonexistent physical address)",
            "[node9:04242] Signal: Bus error (7)",
            // Two processes' faulthandler messages interleaved byte by byte.
            "tests/test_x.py Fatal Python error: Fatal Python error: Bus errorBus error",
        ] {
            let v = rules.classify_parts("error_line", line);
            assert_eq!((v.role, v.class()), (Role::Root, bus), "{line}");
            assert!(v.rule.as_ref().and_then(|r| r.advice.as_deref()).is_some_and(|a| a.contains("/dev/shm")), "{line}");
        }
        // A DataLoader's own report of its worker's bus error stays a DataLoader failure.
        assert_eq!(
            rules.classify_parts("exception", "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error.").class(),
            Some(FaultClass::Dataloader)
        );
        assert_eq!(rules.classify_parts("error_line", "Segmentation fault (core dumped)").class(), Some(FaultClass::Segfault));
    }

    #[test]
    fn a_rendezvous_still_waiting_for_its_participants_is_a_symptom() {
        let rules = RuleSet::builtin();
        let v = rules.classify_parts(
            "error_line",
            "This thread has been waiting for `initialize clique for rank 2; clique=devices=[0,1,2,3]; stream=0; run_id=17` for 20 seconds and may be stuck. Expected 4 threads to join the rendezvous, but not all of them arrived on time.",
        );
        assert_eq!(v.role, Role::Symptom);
        // A wait that ran out (the rule's id says so): where it points is a hang.
        assert!(v.rule.is_some_and(|r| r.id.contains("timeout")));
        // The coordination service's key-value wait: a key other processes never published.
        let v = rules.classify_parts(
            "error_line",
            "Execution of replica 1 failed: DEADLINE_EXCEEDED: GetKeyValue() timed out with key: devices=[0,1]; stream=0 and duration: 5m",
        );
        assert_eq!(v.role, Role::Symptom);
        assert!(v.rule.is_some_and(|r| r.id.contains("timeout")));
    }

    #[test]
    fn process_ends_are_classified_by_signal() {
        let rules = RuleSet::builtin();
        let end = |signal: Option<i32>, exit_code: Option<i32>| ProcessEnd { rank: coroner_model::Rank(0), exit_code, signal, at_ns: None };
        assert_eq!(rules.classify_end(&end(Some(11), None)).class(), Some(FaultClass::Segfault));
        assert_eq!(rules.classify_end(&end(Some(9), None)).class(), Some(FaultClass::Killed));
        assert_eq!(rules.classify_end(&end(Some(15), None)).role, Role::Symptom);
        assert_eq!(rules.classify_end(&end(None, Some(0))).role, Role::Noise);
    }
}
