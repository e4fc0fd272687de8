"""The slurmddp:// init method and the torch Store over slurm-ddp's store
(slurmddp.torch)."""
from __future__ import annotations

import os
import warnings
from datetime import timedelta
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union
from urllib.parse import parse_qs, urlparse

import torch.distributed as dist

from . import _core


SCHEME = "slurmddp"


def _warn_if_the_master_changed() -> None:
    """Note [A master changed after the plugin] (runtime/env/identity.cpp), for
    env:// too: torch reads MASTER_ADDR/MASTER_PORT as they are."""
    exported = os.environ.get("SLURMDDP_MASTER")
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not exported or addr is None or port is None or f"{addr}:{port}" == exported:
        return
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # once a node
    warnings.warn(
        f"slurmddp: MASTER_ADDR:MASTER_PORT={addr}:{port} differs from {exported}, which "
        f"slurm-ddp's plugin exported for step {os.environ.get('SLURMDDP_STEP', '?')}: set after "
        f"the plugin ran (a container image's preset, or pyxis with enroot's PyTorch hook loaded "
        f"after the plugin). init_method=\"slurmddp://\" uses {exported}; env:// uses "
        f"{addr}:{port}, which enroot's hook gives every step of a job. Fix: load slurm-ddp's "
        f"plugstack line after pyxis's, or srun --container-env=MASTER_ADDR,MASTER_PORT",
        RuntimeWarning, stacklevel=3)


_warn_if_the_master_changed()
# torch.distributed's default process group timeout (30 minutes).
_DEFAULT_TIMEOUT = timedelta(minutes=30)


class Store(dist.Store):
    """A ``torch.distributed.Store`` backed by slurm-ddp's store.

    What ``init_method="slurmddp://"`` hands to torch; usable directly, e.g.
    ``dist.init_process_group("gloo", store=Store(slurmddp.connect(...)),
    rank=r, world_size=n)``. Blocking calls use the store's ``timeout``
    (``set_timeout``) unless given one and raise ``slurmddp.TimeoutError``
    naming the missing keys.
    """

    def __init__(self, store: _core.Store, timeout: timedelta = _DEFAULT_TIMEOUT) -> None:
        super().__init__()
        self._store = store
        self._rendezvous: Optional[_core.Rendezvous] = None
        self.set_timeout(timeout)

    @property
    def endpoint(self) -> str:
        """host:port of the server."""
        return self._store.endpoint

    def _ms(self, timeout: Optional[timedelta] = None) -> int:
        t = self.timeout if timeout is None else timeout
        return max(0, int(t.total_seconds() * 1000))

    def set(self, key: str, value: Union[bytes, str]) -> None:
        self._store.set(key, value)

    def get(self, key: str) -> bytes:
        return self._store.get(key, self._ms())

    def add(self, key: str, value: int) -> int:
        return self._store.add(key, value)

    def compare_set(self, key: str, expected_value: Union[bytes, str],
                    desired_value: Union[bytes, str]) -> bytes:
        return self._store.compare_set(key, expected_value, desired_value)

    def wait(self, keys: List[str], timeout: Optional[timedelta] = None) -> None:
        self._store.wait(list(keys), self._ms(timeout))

    def check(self, keys: List[str]) -> bool:
        return self._store.check(list(keys))

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(key)

    def num_keys(self) -> int:
        raise _core.Error("slurmddp.torch.Store: num_keys() is not supported by slurm-ddp's store")


# Stores handed to torch stay alive as long as the process: torch keeps only
# its C++ half, and the rank that hosts the server must keep serving the
# others until they are done (it lingers at exit until they disconnect).
_live_stores: List[Store] = []


def _query_int(query: Dict[str, List[str]], name: str) -> Optional[int]:
    """The URL's rank= or world_size=; None when absent or negative (torch's -1,
    "not given")."""
    values = query.get(name)
    if not values:
        return None
    try:
        value = int(values[-1])
    except ValueError:
        raise _core.InvalidArgument(
            f"slurmddp:// rendezvous: {name}={values[-1]!r} in the init_method URL is not an "
            f"integer") from None
    return value if value >= 0 else None


def _rendezvous_handler(url: str, timeout: timedelta = _DEFAULT_TIMEOUT,
                        **kwargs: Any) -> Iterator[Tuple[Store, int, int]]:
    query = parse_qs(urlparse(url).query)
    r = _core.rendezvous(_query_int(query, "rank"), _query_int(query, "world_size"),
                         max(0, int(timeout.total_seconds() * 1000)))
    store = Store(r.store, timeout)
    store._rendezvous = r  # for Progress: rank, world size, node
    _live_stores.append(store)
    yield (store, r.rank, r.world_size)
    raise RuntimeError("slurmddp:// rendezvous: a process group cannot re-rendezvous on the "
                       "same store; call init_process_group again")


def _register() -> None:
    try:
        dist.register_rendezvous_handler(SCHEME, _rendezvous_handler)
    except RuntimeError:
        pass  # already registered (the module was reloaded)


if dist.is_available():
    _register()
