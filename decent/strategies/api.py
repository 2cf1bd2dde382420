"""Everything a strategy is written with, in one import::

    from decent.strategies.api import (STRATEGIES, LocalTrainingConfig, Strategy,
                                       average_with_neighbours, local_steps,
                                       make_optimizer, params, phase, positive)

The names live in the modules of their layer (the contract in
:mod:`decent.strategies.base` and :mod:`decent.strategies.phases`, the range helpers in
:mod:`decent.core.schema`, the toolkit in :mod:`decent.strategies.toolkit`,
:mod:`decent.strategies.local_training` and :mod:`decent.strategies.gossip`, ...); a
method written outside decent imports them from here, so it need not know which module
holds which. Nothing here imports Ray or networkx: a strategy runs unchanged on every
backend.

This module imports the strategy registry, and with it every built-in method; so
decent's own methods import from the modules above, never from here (that would be an
import circle).
"""

from __future__ import annotations

from decent.compression import (
    COMPRESSORS,
    CompressionConfig,
    ErrorFeedback,
    TopKConfig,
    build_compressor,
)
from decent.compression.tree import compress_tree, decompress_tree
from decent.core.errors import ConfigError, StrategyError
from decent.core.graph import GraphFacts, RoundGraph
from decent.core.messages import Declared, Message, Scalar, Seed, wire_size
from decent.core.registry import component
from decent.core.schema import (
    at_least,
    count_or,
    in_range,
    number,
    one_of,
    positive,
    seed_field,
    text,
)
from decent.core.stats import Max, Mean
from decent.core.storable import storable
from decent.models import params
from decent.robust.aggregators import (
    AGGREGATORS,
    AggregatorConfig,
    aggregate,
    build_aggregator,
    robust_field,
)
from decent.robust.attacks import ATTACKS, AttackConfig, map_floats
from decent.robust.neighbourhood import robust_average
from decent.robust.omniscient import View as AttackView
from decent.strategies.base import Client, PhaseContext, SharedTensors, Strategy
from decent.strategies.config import LRScheduleConfig, StrategyConfig
from decent.strategies.fedavg import OuterStepConfig, ServerStar, outer_optimizer
from decent.strategies.gossip import mixing_weights, weighted_sum
from decent.strategies.inbox import Inbox
from decent.strategies.local_training import (
    OPTIMIZERS,
    LocalTrainingConfig,
    adamw_betas,
    check_betas,
    local_steps,
    make_optimizer,
)
from decent.strategies.phases import AGGREGATOR, SERVER, WORKER, Phase, phase
from decent.strategies.push import absorb, push_to_out_neighbours, sum_received
from decent.strategies.registry import STRATEGIES
from decent.strategies.toolkit import (
    average_with_neighbours,
    gradient,
    mix_with_neighbours,
    private_gradient,
    shard_batches,
    shard_gradient,
    stochastic_gradient,
)
from decent.strategies.wire import WIRE_DTYPES, wire_dtype_field
from decent.strategies.zo_estimate import zo_estimate
from decent.strategies.zo_training import ZOStepConfig, zo_steps
from decent.tasks.base import ClientData, Task

# Sorted; docs/reference/strategies-api.md groups them by what they are for, and a test
# checks that the page documents every name here and that the writing-a-strategy guide
# and the tutorial import nothing else.
__all__ = [
    "AGGREGATOR",
    "AGGREGATORS",
    "ATTACKS",
    "COMPRESSORS",
    "OPTIMIZERS",
    "SERVER",
    "STRATEGIES",
    "WIRE_DTYPES",
    "WORKER",
    "AggregatorConfig",
    "AttackConfig",
    "AttackView",
    "Client",
    "ClientData",
    "CompressionConfig",
    "ConfigError",
    "Declared",
    "ErrorFeedback",
    "GraphFacts",
    "Inbox",
    "LRScheduleConfig",
    "LocalTrainingConfig",
    "Max",
    "Mean",
    "Message",
    "OuterStepConfig",
    "Phase",
    "PhaseContext",
    "RoundGraph",
    "Scalar",
    "Seed",
    "ServerStar",
    "SharedTensors",
    "Strategy",
    "StrategyConfig",
    "StrategyError",
    "Task",
    "TopKConfig",
    "ZOStepConfig",
    "absorb",
    "adamw_betas",
    "aggregate",
    "at_least",
    "average_with_neighbours",
    "build_aggregator",
    "build_compressor",
    "check_betas",
    "component",
    "compress_tree",
    "count_or",
    "decompress_tree",
    "gradient",
    "in_range",
    "local_steps",
    "make_optimizer",
    "map_floats",
    "mix_with_neighbours",
    "mixing_weights",
    "number",
    "one_of",
    "outer_optimizer",
    "params",
    "phase",
    "positive",
    "private_gradient",
    "push_to_out_neighbours",
    "robust_average",
    "robust_field",
    "seed_field",
    "shard_batches",
    "shard_gradient",
    "stochastic_gradient",
    "storable",
    "sum_received",
    "text",
    "weighted_sum",
    "wire_dtype_field",
    "wire_size",
    "zo_estimate",
    "zo_steps",
]
