"""Run after tests/nodes (`make test-nodes`): the clusters that suite made
(tests/netns.py, prefix MPIPS_CLUSTER_PREFIX) left nothing behind: no
namespace, link, host file, directory, process or Open MPI session
directory (a killed node's daemon leaves one in the shared /tmp) of a
cluster whose owner is gone. A cluster of a live owner (another run
beside this one) is not ours to judge."""
from __future__ import annotations

import os

import pytest

from tests import netns


def test_no_cluster_left_anything():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    left = netns.leftovers(netns.prefix())
    assert not any(left.values()), f"left behind: {left}"
