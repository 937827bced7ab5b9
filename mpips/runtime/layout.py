"""Which rank does what: servers first, then group servers (a paradigm with
a second level of servers, `Paradigm.group_servers`), then workers, then
the evaluator (`--evaluator`). The ranks are mpips' own: the placement
(mpips/runtime/placement.py) chose which launched rank has which number."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config import ConfigError
from ..paradigms import paradigm_class
from ..paradigms.base import counted
from ..paradigms.grouping import group_options, parse_assignment

SERVER, GROUP_SERVER, WORKER, EVALUATOR = "server", "group_server", "worker", "evaluator"


@dataclass(frozen=True)
class Layout:
    servers: int
    group_servers: int
    workers: int
    evaluators: int = 0

    @property
    def size(self) -> int:
        return self.servers + self.group_servers + self.workers + self.evaluators

    @property
    def clients(self) -> int:
        """Rows of the servers' control table: the ranks that push to them,
        the workers, or the group servers when there are some."""
        return self.group_servers or self.workers

    @property
    def server_ranks(self) -> list[int]:
        return list(range(self.servers))

    @property
    def group_server_ranks(self) -> list[int]:
        return list(range(self.servers, self.servers + self.group_servers))

    @property
    def worker_ranks(self) -> list[int]:
        first = self.servers + self.group_servers
        return list(range(first, first + self.workers))

    def role(self, rank: int) -> tuple[str, int]:
        """(role, index within the role) of a world rank."""
        if rank < self.servers:
            return SERVER, rank
        if rank < self.servers + self.group_servers:
            return GROUP_SERVER, rank - self.servers
        if rank < self.servers + self.group_servers + self.workers:
            return WORKER, rank - self.servers - self.group_servers
        return EVALUATOR, rank - self.servers - self.group_servers - self.workers

    def to_dict(self) -> dict:
        return asdict(self)

    def placement(self, hosts: list[str]) -> list[dict]:
        """Each rank's host and role, in rank order (run.h5's layout keeps it)."""
        return [dict(zip(("rank", "host", "role", "index"), (rank, host, *self.role(rank))))
                for rank, host in enumerate(hosts)]


NOT_LAUNCHED = ("a job runs one process per rank, and this is one process: start it under a launcher, "
                "`mpirun -n $(mpips ranks --workers N ...) mpips train --workers N ...` (`mpips ranks` counts "
                "the ranks these settings need; srun under Slurm), or run the whole job in this one process "
                "in virtual time: `mpips simulate --workers N ...`")


def roles_note(layout: Layout, derived: bool) -> str:
    """Rank 0's line on how the ranks started were split, when a role other than
    servers and workers took some and the workers were derived from -n (`-n 5
    --evaluator` trains 3: one rank is the server, one the evaluator); '' otherwise."""
    if not derived or not (layout.group_servers or layout.evaluators):
        return ""
    parts = [f"{layout.servers} server(s)", f"{layout.group_servers} group server(s)" if layout.group_servers else "",
             f"{layout.workers} worker(s)", "1 evaluator" if layout.evaluators else ""]
    return (f"mpips: the {layout.size} ranks started are {' + '.join(filter(None, parts))}: the workers are "
            f"what the other roles leave (--workers N checks the count; `mpips ranks --workers N ...` "
            f"says how many ranks N workers need)")


def ranks_for(config) -> int:
    """The world size a job of `config` needs (its `workers` given), checked by make_layout."""
    if not config.workers:
        raise ConfigError("workers", config.workers, "the number of workers is needed (--workers N)")
    size = config.servers + _group_servers(config) + config.workers + (1 if config.evaluator else 0)
    make_layout(config, size)
    return size


def _group_servers(config) -> int:
    return counted(config.paradigm, paradigm_class(config.paradigm).group_servers, config, least=0)


def make_layout(config, world_size: int) -> Layout:
    """The layout for this world size, or a ConfigError saying why not."""
    group_servers = _group_servers(config)
    evaluators = 1 if config.evaluator else 0
    if world_size == 1:
        # `mpips train` (or mpips.train) started as a plain process: no launcher
        raise ConfigError("ranks", world_size, NOT_LAUNCHED)
    if config.servers >= world_size:
        raise ConfigError("servers", config.servers,
                          f"must be < the {world_size} ranks started, leaving ranks for workers")
    workers = world_size - config.servers - group_servers - evaluators
    if group_servers and workers < 1:
        # say it of the groups: "workers=-5" would blame a setting nobody gave
        raise ConfigError("groups", group_servers,
                          f"each group needs a group server and a worker: at most "
                          f"{(world_size - config.servers - evaluators) // 2} with {world_size} ranks, "
                          f"{config.servers} server(s) and {evaluators} evaluator(s)")
    if workers < 1:
        raise ConfigError("workers", workers,
                          f"{world_size} ranks = servers ({config.servers}) + group servers "
                          f"({group_servers}) + workers + evaluator ({evaluators}): "
                          f"at least one worker is needed")
    if config.workers and config.workers != workers:
        raise ConfigError("workers", config.workers,
                          f"must equal ranks - servers - group servers = {workers} "
                          f"(started {world_size} ranks), or be 0 to derive it")
    if group_servers > workers:
        raise ConfigError("groups", group_servers, f"must be <= workers ({workers})")
    if group_servers and group_options(config).group_assignment:
        parse_assignment(group_options(config).group_assignment, workers, group_servers)
    return Layout(config.servers, group_servers, workers, evaluators)
