"""The shared contracts between the pipeline's stages: what an environment, an instance, a
workload and a load generator are, and the registry of the plugins that implement them.

Environments (isotax.environments) and workloads (isotax.workloads) implement these protocols,
on top of the defaults in environments/base.py and workloads/base.py; the runner, the analysis
and the report only ever talk to them through here. May import image, facts and model only.

One module per part, all of it importable from here (`from isotax.protocols import Instance`,
`protocols.workloads()`):

- params.py: ParamSpec, a parameter as a plugin declares it;
- environment.py: the environment kinds' and instances' contract;
- workload.py: the workloads', the load generator's and the launcher's;
- registry.py: the plugins, found by their packages' names (the one dynamic import).
"""

# What an instance is (Facts), how it is reached (Reach) and its isolation class live in
# isotax.facts, below the store that keeps them; re-exported here, where the plugins look.
from isotax.facts import Facts, Isolation, Reach
from isotax.protocols.environment import (
    NETWORKS,
    PHASES,
    STORAGES,
    Availability,
    Completed,
    ElsewhereNode,
    Environment,
    EnvironmentFacts,
    EnvSpec,
    Evidence,
    ExecError,
    GuestStat,
    Instance,
    LeakFinder,
    Leftover,
    NodeIdentity,
    OwnCpuGroup,
    PlatformLost,
    ServiceEndpoints,
    SocketStack,
    Stage,
    StopIncomplete,
    Unavailable,
    VersionCommand,
)
from isotax.protocols.loadgen_description import LoadGenDescription
from isotax.protocols.params import Params, ParamSpec
from isotax.protocols.registry import (
    ENVIRONMENTS,
    PLUGIN_PACKAGES,
    WORKLOADS,
    environment_kinds,
    environments,
    figure_hints,
    headline_metric,
    image_recipe,
    isolation_of,
    kinds_with,
    workload_image_hooks,
    workload_packages,
    workload_ports,
    workloads,
)
from isotax.protocols.starts import Burst, StartRecord
from isotax.protocols.workload import (
    AnyWorkload,
    ClientsCpu,
    CpuCurve,
    FigureHints,
    LatencyPanel,
    Launched,
    Launcher,
    LaunchingWorkload,
    LoadGen,
    Need,
    Needs,
    Port,
    Workload,
    WorkloadFacts,
)

__all__ = [
    "ENVIRONMENTS",
    "NETWORKS",
    "PHASES",
    "PLUGIN_PACKAGES",
    "STORAGES",
    "WORKLOADS",
    "AnyWorkload",
    "Availability",
    "Burst",
    "ClientsCpu",
    "Completed",
    "CpuCurve",
    "ElsewhereNode",
    "EnvSpec",
    "Environment",
    "EnvironmentFacts",
    "Evidence",
    "ExecError",
    "Facts",
    "FigureHints",
    "GuestStat",
    "Instance",
    "Isolation",
    "LatencyPanel",
    "Launched",
    "Launcher",
    "LaunchingWorkload",
    "LeakFinder",
    "Leftover",
    "LoadGen",
    "LoadGenDescription",
    "Need",
    "Needs",
    "NodeIdentity",
    "OwnCpuGroup",
    "ParamSpec",
    "Params",
    "PlatformLost",
    "Port",
    "Reach",
    "ServiceEndpoints",
    "SocketStack",
    "Stage",
    "StartRecord",
    "StopIncomplete",
    "Unavailable",
    "VersionCommand",
    "Workload",
    "WorkloadFacts",
    "environment_kinds",
    "environments",
    "figure_hints",
    "headline_metric",
    "image_recipe",
    "isolation_of",
    "kinds_with",
    "workload_image_hooks",
    "workload_packages",
    "workload_ports",
    "workloads",
]
