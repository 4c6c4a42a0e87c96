"""The HTTP contract shared by client and server. Imports only pydantic and the standard library."""

from dpmine.wire.admin import *  # noqa: F403
from dpmine.wire.batch import *  # noqa: F403
from dpmine.wire.budget import *  # noqa: F403
from dpmine.wire.common import *  # noqa: F403
from dpmine.wire.counts import *  # noqa: F403
from dpmine.wire.datasets import *  # noqa: F403
from dpmine.wire.items import *  # noqa: F403
from dpmine.wire.itemsets import *  # noqa: F403
from dpmine.wire.jobs import *  # noqa: F403
from dpmine.wire.operations import *  # noqa: F403
from dpmine.wire.queries import *  # noqa: F403
from dpmine.wire.query_tree import *  # noqa: F403
from dpmine.wire.redescriptions import *  # noqa: F403
from dpmine.wire.rule_lists import *  # noqa: F403
from dpmine.wire.statistics import *  # noqa: F403
from dpmine.wire.trees import *  # noqa: F403
