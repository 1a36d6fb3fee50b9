//! [`TestServer`]: the real server (`coronerd::start`) inside the test process, on ports it bound
//! itself, with a runtime and a data dir of its own; stopped in order (the shutdown token, then
//! its commits) when dropped. Nothing of it is process-wide: several live side by side, each
//! with its own configuration value.

use super::Endpoints;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a stopping server may take to finish its commits before the test moves on.
const STOP_LIMIT: Duration = Duration::from_secs(20);

type Launched = (tokio::runtime::Runtime, CancellationToken, tokio::task::JoinHandle<anyhow::Result<()>>, coronerd::Bound);

pub struct TestServer {
    endpoints: Endpoints,
    bound: coronerd::Bound,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    runtime: Option<tokio::runtime::Runtime>,
    data_dir: std::path::PathBuf,
    /// What it was started with, for [`TestServer::restart`].
    config: coronerd::Config,
    _data: tempfile::TempDir,
}

impl TestServer {
    /// A server with the test defaults (`coronerd::Config::for_tests`).
    pub fn start() -> TestServer {
        TestServer::start_with(|_| {})
    }

    /// A server whose configuration `configure` changes from the test defaults first.
    pub fn start_with(configure: impl FnOnce(&mut coronerd::Config)) -> TestServer {
        TestServer::try_start_with(configure).unwrap_or_else(|e| panic!("coronerd::start: {e:#}"))
    }

    /// The same, or why `coronerd::start` refused (a bad configuration).
    pub fn try_start_with(configure: impl FnOnce(&mut coronerd::Config)) -> anyhow::Result<TestServer> {
        let data = tempfile::tempdir()?;
        let mut config = coronerd::Config::for_tests(data.path().to_path_buf());
        configure(&mut config);
        let data_dir = config.data_dir.clone();
        let (runtime, shutdown, task, bound) = TestServer::launch(config.clone())?;
        Ok(TestServer { endpoints: Endpoints::new(bound), bound, shutdown, task: Some(task), runtime: Some(runtime), data_dir, config, _data: data })
    }

    fn launch(config: coronerd::Config) -> anyhow::Result<Launched> {
        // Two workers, like a small host: the tests run many servers at once on few cores.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("test-coronerd").enable_all().build()?;
        let shutdown = CancellationToken::new();
        let (server, bound) = runtime.block_on(coronerd::start(config, shutdown.clone()))?;
        let task = runtime.spawn(server);
        Ok((runtime, shutdown, task, bound))
    }

    /// Stops it in order and starts it again on the same data dir and configuration (new ports).
    pub fn restart(&mut self) {
        self.stop_in_order().unwrap_or_else(|e| panic!("stop before the restart: {e:#}"));
        let (runtime, shutdown, task, bound) = TestServer::launch(self.config.clone()).unwrap_or_else(|e| panic!("coronerd::start again: {e:#}"));
        (self.endpoints, self.bound, self.shutdown, self.task, self.runtime) = (Endpoints::new(bound), bound, shutdown, Some(task), Some(runtime));
    }

    /// The addresses it bound.
    pub fn bound(&self) -> coronerd::Bound {
        self.bound
    }

    /// Its data dir (its SQLite metastore is `coroner.db` there).
    pub fn data_path(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// Stops it as SIGTERM stops the binary (stop accepting, finish commits, write final
    /// reports); the server's own result, or an error when it took longer than [`STOP_LIMIT`].
    fn stop_in_order(&mut self) -> anyhow::Result<()> {
        let (Some(runtime), Some(task)) = (self.runtime.take(), self.task.take()) else { return Ok(()) };
        self.shutdown.cancel();
        let result = runtime.block_on(async { tokio::time::timeout(STOP_LIMIT, task).await });
        // Blocking work still running (a search stops at its next budget check) gets a bound too.
        runtime.shutdown_timeout(Duration::from_secs(5));
        match result {
            Ok(Ok(served)) => served,
            Ok(Err(join)) => Err(anyhow::anyhow!("the test server's task failed: {join}")),
            Err(_) => Err(anyhow::anyhow!("the test server did not stop within {STOP_LIMIT:?}")),
        }
    }
}

impl std::ops::Deref for TestServer {
    type Target = Endpoints;
    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let stopped = self.stop_in_order();
        if let Err(e) = stopped {
            if !std::thread::panicking() {
                panic!("{e:#}");
            }
        }
    }
}
