"""Fleet planning: which engine each host of a fleet gets, why not, and what would change that.

``read_inventories`` turns inventories into hosts and distinct profiles, ``plan_fleet`` decides
each distinct profile once, ``advise`` finds the changes that move the most hosts to a better
engine, and :mod:`snapbuild.fleet.report` / :mod:`snapbuild.fleet.emit` write the results.
"""

from snapbuild.fleet.inventory import Inventory, InventoryIssue
from snapbuild.fleet.planner import FleetPlan, plan_fleet
from snapbuild.fleet.readers import read_inventories

__all__ = ["FleetPlan", "Inventory", "InventoryIssue", "plan_fleet", "read_inventories"]
