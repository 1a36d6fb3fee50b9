//! Launcher mode: an agent around torchrun speaks for a whole node, and files each line under the
//! worker rank its prefix names (`coroner_parse::RankFiler`, the rule the pipeline follows too).
//! This module recognises the launcher and where its node's ranks start (`node_rank_base`).

use std::ffi::OsString;
use std::path::Path;

/// Whether the wrapped command is a per-node launcher, as detected from its program and
/// arguments: torchrun (and `python -m torch.distributed.run|launch`), `accelerate launch` (which
/// runs torchrun's agent), DeepSpeed's `deepspeed` and `python -m deepspeed.launcher.launch`.
pub fn is_node_launcher(command: &[OsString]) -> bool {
    let Some(program) = command.first() else { return false };
    let base = Path::new(program).file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
    if base == "torchrun" || base == "deepspeed" {
        return true;
    }
    if base == "accelerate" {
        return command.get(1).is_some_and(|a| a == "launch");
    }
    if !base.starts_with("python") {
        return false;
    }
    let args: Vec<String> = command[1..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
    for (i, arg) in args.iter().enumerate() {
        let module = if arg == "-m" { args.get(i + 1).map(String::as_str) } else { arg.strip_prefix("-m").filter(|m| !m.is_empty() && !m.starts_with('-')) };
        if let Some(module) = module {
            return matches!(
                module,
                "torch.distributed.run" | "torch.distributed.launch" | "accelerate.commands.launch" | "deepspeed.launcher.launch" | "deepspeed.launcher.runner"
            );
        }
        // Python's own options come before -m; anything else (a script) ends the search.
        if !arg.starts_with('-') {
            return false;
        }
    }
    false
}

/// The global rank of local rank 0 on this node, from torchrun's `--node-rank` and
/// `--nproc-per-node` arguments (or their `PET_*` environment forms). `None` when unknown.
pub fn node_rank_base_from_args(command: &[OsString], env: impl Fn(&str) -> Option<String>) -> Option<u32> {
    let args: Vec<String> = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let node_rank = option_value(&args, &["--node-rank", "--node_rank"]).or_else(|| env("PET_NODE_RANK"));
    let nproc = option_value(&args, &["--nproc-per-node", "--nproc_per_node"]).or_else(|| env("PET_NPROC_PER_NODE"));
    let node_rank: u32 = node_rank?.trim().parse().ok()?;
    if node_rank == 0 {
        return Some(0);
    }
    let nproc: u32 = nproc?.trim().parse().ok()?;
    node_rank.checked_mul(nproc)
}

fn option_value(args: &[String], names: &[&str]) -> Option<String> {
    for (i, arg) in args.iter().enumerate() {
        for name in names {
            if arg == name {
                return args.get(i + 1).cloned();
            }
            if let Some(v) = arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
                return Some(v.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn detects_torchrun_and_its_module_forms() {
        assert!(is_node_launcher(&cmd(&["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"])));
        assert!(is_node_launcher(&cmd(&["python3", "-m", "torch.distributed.run", "train.py"])));
        assert!(is_node_launcher(&cmd(&["python", "-u", "-mtorch.distributed.launch", "train.py"])));
        assert!(!is_node_launcher(&cmd(&["python", "train.py", "-m", "torch.distributed.run"])));
        assert!(!is_node_launcher(&cmd(&["python", "-m", "pytest"])));
        assert!(is_node_launcher(&cmd(&["/opt/venv/bin/accelerate", "launch", "--multi_gpu", "train.py"])));
        assert!(!is_node_launcher(&cmd(&["accelerate", "config"])));
        assert!(is_node_launcher(&cmd(&["deepspeed", "--num_gpus", "8", "train.py"])));
        assert!(is_node_launcher(&cmd(&["python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"])));
        assert!(!is_node_launcher(&cmd(&["sh", "-c", "torchrun"])));
        assert!(!is_node_launcher(&[]));
    }

    #[test]
    fn node_rank_base_from_torchrun_arguments() {
        let none = |_: &str| None;
        let a = cmd(&["torchrun", "--nnodes=2", "--node-rank=1", "--nproc-per-node", "4", "t.py"]);
        assert_eq!(node_rank_base_from_args(&a, none), Some(4));
        let a = cmd(&["torchrun", "--node_rank", "3", "--nproc_per_node=8", "t.py"]);
        assert_eq!(node_rank_base_from_args(&a, none), Some(24));
        assert_eq!(node_rank_base_from_args(&cmd(&["torchrun", "--node-rank=0", "t.py"]), none), Some(0));
        assert_eq!(node_rank_base_from_args(&cmd(&["torchrun", "--node-rank=1", "--nproc-per-node=gpu"]), none), None);
        assert_eq!(node_rank_base_from_args(&cmd(&["torchrun", "t.py"]), none), None);
        let env = |k: &str| match k {
            "PET_NODE_RANK" => Some("2".to_string()),
            "PET_NPROC_PER_NODE" => Some("2".to_string()),
            _ => None,
        };
        assert_eq!(node_rank_base_from_args(&cmd(&["torchrun", "t.py"]), env), Some(4));
    }
}
