r"""Traffic classes: how switches schedule the classes of traffic that share a link.

A communicator (and so each of its collectives), a job, or a background stream carries a traffic class; a
:class:`TrafficPolicy` says how the switches schedule the classes. The flow model then shares each link in two
levels (``simulator.kernels.classes``):

* **strict priority** between levels: level 0 is served first, by max-min over the whole capacity of every
  link; level 1 shares what level 0 leaves, and so on;
* **weighted sharing** between the classes of one level (ETS, DWRR, InfiniBand VL arbitration): on each link
  the backlogged classes of the level split its capacity in proportion to their weights, and a class that
  cannot use its share (its flows are held back elsewhere) leaves it to the others (work-conserving);
* **max-min** between the flows of one class.

One class (or no policy) is plain max-min: the allocation is today's, bit for bit.

Schedulers, as a class's ``scheduler``:

* ``prio:N`` (Ethernet strict priority, IEEE 802.1Q-2018 8.6.8.1): level N, served before every higher N and
  before every ETS class (802.1Qaz serves strict-priority traffic classes first). Classes with one N share
  that level equally (weight 1 each).
* ``ets:W`` (Ethernet Enhanced Transmission Selection, IEEE 802.1Qaz / 802.1Q-2018 8.6.8.3): the level after
  every strict priority, weight W (the bandwidth percentage of the class's ETS entry; only ratios matter).
* ``vl-high:W`` and ``vl-low:W`` (InfiniBand VL arbitration, InfiniBand Architecture Specification vol. 1,
  7.6.9): a VL's entry weight in the high- or low-priority arbitration table; the high table is level 0,
  the low table the level after it. The high-priority limit (how many high-priority packets may pass while
  low-priority ones wait) is ignored: the high table is served strictly first, the limit's worst case for the
  low classes.

Marking: ``NCCL_IB_TC`` (the traffic class byte of the RoCE GRH / IP header; its DSCP is ``TC >> 2``) selects
the Ethernet class that lists that ``dscp``; ``NCCL_IB_SL`` (the InfiniBand service level, which the subnet
manager's SL2VL table maps to a VL) selects the InfiniBand class that lists that ``sl`` (NCCL environment
variables, NCCL user guide). A policy of Ethernet schedulers reads ``NCCL_IB_TC`` only, one of InfiniBand
schedulers ``NCCL_IB_SL`` only (what each fabric's switches look at).

A collective's class (:meth:`TrafficPolicy.class_of`): the class named after its group ("tp", "pp", "dp",
"cp", "ep", or a job's name) or listing it in ``groups`` (a per-communicator setting, as
``ncclConfig_t.trafficClass`` is), else the class the NCCL environment selects, else the class named
``default``; anything else is refused.

Spec syntax (``--traffic-classes``): classes separated by commas, each ``NAME=SCHEDULER:VALUE`` followed by
any of ``/group:G`` (repeatable), ``/dscp:N`` (0..63), ``/sl:N`` (0..15):

>>> policy = TrafficPolicy.parse("tp=prio:0,dp=ets:60/group:cp,ckpt=ets:40/dscp:10")
>>> [(c.name, c.level, c.weight) for c in policy.classes]
[('tp', 0, 1.0), ('dp', 8, 60.0), ('ckpt', 8, 40.0)]
>>> policy.class_of("cp"), policy.with_environment({"NCCL_IB_TC": "41"}).class_of(None)
('dp', 'ckpt')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from topologies.checks import finite, integer, reject
from topologies.topology import Topology

__all__ = ["SCHEDULERS", "StorageStream", "TrafficClass", "TrafficPolicy", "checkpoint_streams"]

# IEEE 802.1Q has 8 traffic classes per port: at most 8 strict-priority levels before the ETS level
STRICT_LEVELS = 8
SCHEDULERS = ("prio", "ets", "vl-high", "vl-low")
_ETHERNET = ("prio", "ets")
_SPEC = "NAME=SCHEDULER:VALUE[/group:G][/dscp:N][/sl:N], comma-separated (SCHEDULER: prio, ets, vl-high, vl-low)"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficClass:
    """One class: its ``scheduler`` (``SCHEDULERS``) and ``value`` (``prio``: the strict level N in 0..7;
    otherwise the weight > 0), the step groups or job names it catches besides its own name, and the DSCP
    (Ethernet) or service level (InfiniBand) that marks it."""

    name: str
    scheduler: str
    value: float
    groups: tuple[str, ...] = ()
    dscp: int | None = None
    sl: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or any(ch in self.name for ch in ",=/: "):
            raise reject("TrafficClass.name", self.name, "a non-empty name without , = / : or spaces")
        if self.scheduler not in SCHEDULERS:
            raise reject(f"TrafficClass.scheduler ({self.name})", self.scheduler, f"one of {', '.join(SCHEDULERS)}")
        if self.scheduler == "prio":
            level = integer(
                f"TrafficClass.value ({self.name})", self.value, low=0, high=STRICT_LEVELS - 1,
                expected=f"a strict level from 0 to {STRICT_LEVELS - 1} for prio",
            )  # fmt: skip
            object.__setattr__(self, "value", float(level))
        else:
            object.__setattr__(
                self,
                "value",
                finite(f"TrafficClass.value ({self.name})", self.value, low=0, low_open=True, expected="a weight > 0"),
            )
        if not isinstance(self.groups, tuple) or not all(isinstance(g, str) and g for g in self.groups):
            raise reject(f"TrafficClass.groups ({self.name})", self.groups, "a tuple of group or job names")
        if self.dscp is not None:
            integer(f"TrafficClass.dscp ({self.name})", self.dscp, low=0, high=63)
            if self.scheduler not in _ETHERNET:
                raise reject(f"TrafficClass.dscp ({self.name})", self.dscp, "None for an InfiniBand (vl-) class")
        if self.sl is not None:
            integer(f"TrafficClass.sl ({self.name})", self.sl, low=0, high=15)
            if self.scheduler in _ETHERNET:
                raise reject(f"TrafficClass.sl ({self.name})", self.sl, "None for an Ethernet (prio, ets) class")

    @property
    def level(self) -> int:
        """Its strict-priority level (0 first): ``prio:N`` N, ``vl-high`` 0, ETS and ``vl-low`` after them."""
        if self.scheduler == "prio":
            return int(self.value)
        return 0 if self.scheduler == "vl-high" else STRICT_LEVELS

    @property
    def weight(self) -> float:
        """Its weight among the classes of its level (1 for a strict-priority class)."""
        return 1.0 if self.scheduler == "prio" else float(self.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficPolicy:
    """The classes the switches schedule, and the NCCL environment the communicators were created with
    (``nccl_ib_tc``: NCCL_IB_TC, 0..255; ``nccl_ib_sl``: NCCL_IB_SL, 0..15; None: not set)."""

    classes: tuple[TrafficClass, ...]
    nccl_ib_tc: int | None = None
    nccl_ib_sl: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.classes, tuple) or not self.classes:
            raise reject("TrafficPolicy.classes", self.classes, "a non-empty tuple of TrafficClass")
        if not all(isinstance(c, TrafficClass) for c in self.classes):
            raise reject("TrafficPolicy.classes", self.classes, "a non-empty tuple of TrafficClass")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise reject("TrafficPolicy.classes", ",".join(names), "distinct class names")
        kinds = {c.scheduler in _ETHERNET for c in self.classes}
        if len(kinds) > 1:
            raise reject(
                "TrafficPolicy.classes",
                ",".join(f"{c.name}={c.scheduler}" for c in self.classes),
                "Ethernet schedulers (prio, ets) or InfiniBand ones (vl-high, vl-low), not both",
            )
        caught: dict[str, str] = {}
        for c in self.classes:
            for g in (c.name, *c.groups):
                if caught.setdefault(g, c.name) != c.name:
                    raise reject("TrafficPolicy.classes", g, f"a group caught by one class ({caught[g]} and {c.name})")
        for field, marks in (("dscp", [c.dscp for c in self.classes]), ("sl", [c.sl for c in self.classes])):
            given = [m for m in marks if m is not None]
            if len(set(given)) != len(given):
                raise reject(f"TrafficPolicy.classes ({field})", given, f"each {field} in one class")
        if self.nccl_ib_tc is not None:
            integer("NCCL_IB_TC", self.nccl_ib_tc, low=0, high=255)
        if self.nccl_ib_sl is not None:
            integer("NCCL_IB_SL", self.nccl_ib_sl, low=0, high=15)
        self._environment_class()  # an unmatched mark is refused here, before anything runs

    @classmethod
    def parse(cls, spec: str, *, environ: Mapping[str, str] | None = None) -> TrafficPolicy:
        """The policy a spec string describes (module docstring), with NCCL_IB_TC / NCCL_IB_SL from ``environ``."""
        if not isinstance(spec, str) or not spec.strip():
            raise reject("traffic_classes", spec, _SPEC)
        classes = []
        for part in spec.split(","):
            name, eq, rest = part.strip().partition("=")
            fields = rest.split("/")
            scheduler, colon, value = fields[0].strip().partition(":")
            if not (eq and colon and name.strip()):
                raise reject("traffic_classes", part.strip(), _SPEC)
            try:
                number = float(value)
            except ValueError:
                raise reject(f"traffic_classes ({name.strip()})", value, "a number after the scheduler") from None
            groups: list[str] = []
            marks: dict[str, int] = {}
            for extra in fields[1:]:
                key, colon, item = extra.strip().partition(":")
                if not colon or key not in ("group", "dscp", "sl") or not item:
                    raise reject(f"traffic_classes ({name.strip()})", extra, "/group:G, /dscp:N or /sl:N")
                if key == "group":
                    groups.append(item)
                elif not item.isdigit() or key in marks:
                    raise reject(f"traffic_classes ({name.strip()})", extra, f"one /{key}: with a whole number")
                else:
                    marks[key] = int(item)
            classes.append(
                TrafficClass(
                    name=name.strip(),
                    scheduler=scheduler,
                    value=int(number) if scheduler == "prio" and number.is_integer() else number,
                    groups=tuple(groups),
                    dscp=marks.get("dscp"),
                    sl=marks.get("sl"),
                )
            )
        return cls(classes=tuple(classes)).with_environment(environ or {})

    def with_environment(self, environ: Mapping[str, str]) -> TrafficPolicy:
        """This policy with NCCL_IB_TC and NCCL_IB_SL as ``environ`` sets them (unset or empty: None)."""
        values: list[int | None] = []
        for var, high in (("NCCL_IB_TC", 255), ("NCCL_IB_SL", 15)):
            text = str(environ.get(var, "")).strip()
            if text and not text.isdigit():
                raise reject(var, text, f"an integer from 0 to {high}")
            values.append(integer(var, int(text), low=0, high=high) if text else None)
        return replace(self, nccl_ib_tc=values[0], nccl_ib_sl=values[1])

    @property
    def ethernet(self) -> bool:
        """Ethernet schedulers (ETS, strict priority; marked by DSCP), else InfiniBand (VL arbitration; by SL)."""
        return self.classes[0].scheduler in _ETHERNET

    def _environment_class(self) -> str | None:
        """The class NCCL's environment marks (None: the variable this fabric reads is not set)."""
        if self.ethernet and self.nccl_ib_tc is not None:
            dscp = self.nccl_ib_tc >> 2
            found = [c.name for c in self.classes if c.dscp == dscp]
            if not found and "default" not in self.names:
                raise reject("NCCL_IB_TC", self.nccl_ib_tc, f"a TC whose DSCP (TC >> 2 = {dscp}) a class lists")
            return found[0] if found else "default"
        if not self.ethernet and self.nccl_ib_sl is not None:
            found = [c.name for c in self.classes if c.sl == self.nccl_ib_sl]
            if not found and "default" not in self.names:
                raise reject("NCCL_IB_SL", self.nccl_ib_sl, "a service level a class lists")
            return found[0] if found else "default"
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def class_of(self, group: str | None) -> str:
        """The class of a communicator of ``group`` (a step's group kind or a job's name; None: unnamed): the
        class catching the group, else the one the NCCL environment marks, else ``default``."""
        for c in self.classes:
            if group is not None and (group == c.name or group in c.groups):
                return c.name
        marked = self._environment_class()
        if marked is not None:
            return marked
        if "default" in self.names:
            return "default"
        raise reject(
            "traffic_classes",
            "a communicator of no group" if group is None else group,
            f"a group a class catches (by its name or /group:), an NCCL_IB_TC/SL a class lists, or a class named "
            f"default (classes: {', '.join(self.names)})",
        )

    def indices(self, names: Sequence[str]) -> np.ndarray:
        """Each class name's index in ``classes`` (int64), refusing unknown names."""
        index = {c.name: i for i, c in enumerate(self.classes)}
        bad = [n for n in names if n not in index]
        if bad:
            raise reject("traffic class", bad[0], f"one of {', '.join(self.names)}")
        return np.fromiter((index[n] for n in names), dtype=np.int64, count=len(names))

    @property
    def levels(self) -> np.ndarray:
        """Each class's strict level (int64, 0 served first)."""
        return np.array([c.level for c in self.classes], dtype=np.int64)

    @property
    def weights(self) -> np.ndarray:
        """Each class's weight within its level (float64)."""
        return np.array([c.weight for c in self.classes], dtype=np.float64)


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageStream:
    """A bulk transfer that is no collective (a checkpoint write, a storage read): at ``time_s`` GPU ``src_gpu``
    sends ``nbytes`` to GPU ``dst_gpu`` (topology GPU ids) over the fabric, striped over connections (no
    per-connection cap: links alone bound it), in the class a policy gives ``group`` (``TrafficPolicy.class_of``)."""

    time_s: float
    src_gpu: int
    dst_gpu: int
    nbytes: int
    group: str = "ckpt"

    def __post_init__(self) -> None:
        finite("StorageStream.time_s", self.time_s, low=0)
        integer("StorageStream.src_gpu", self.src_gpu, low=0, expected="a GPU id >= 0")
        integer("StorageStream.dst_gpu", self.dst_gpu, low=0, expected="a GPU id >= 0")
        integer("StorageStream.nbytes", self.nbytes, low=1, expected="a byte count >= 1")
        if self.src_gpu == self.dst_gpu:
            raise reject("StorageStream.dst_gpu", self.dst_gpu, f"a GPU other than src_gpu {self.src_gpu}")
        if not isinstance(self.group, str) or not self.group:
            raise reject("StorageStream.group", self.group, "a non-empty group name")


def checkpoint_streams(
    topology: Topology, *, nbytes_per_server: int, time_s: float = 0.0, group: str = "ckpt"
) -> tuple[StorageStream, ...]:
    """A checkpoint write: at ``time_s`` every server sends ``nbytes_per_server`` from its first GPU (its first
    NIC's rail) to storage, in ``group``'s class.

    ASSUMPTION: the topology builders attach no storage nodes, so server ``i`` of ``N`` writes to the first GPU
    of server ``(i + N // 2) mod N``, which stands for a storage target as far away as a server gets: with the
    builders' block numbering it sits under another leaf (another pod, another dragonfly group) whenever the
    fabric has more than one, so the stream crosses the top tier as traffic to a storage rack would; each server
    also receives one stream, as a storage tier spread over the fabric would take it. One server: refused.

    >>> from topologies.presets import build_system
    >>> [(s.src_gpu, s.dst_gpu) for s in checkpoint_streams(build_system("dgx-h100", nodes=4), nbytes_per_server=1)]
    [(0, 16), (8, 24), (16, 0), (24, 8)]
    """
    servers = topology.num_servers
    if servers < 2:
        raise reject("checkpoint", f"{servers} server", "a topology of at least 2 servers (one writes to another)")
    return tuple(
        StorageStream(
            time_s=time_s,
            src_gpu=topology.gpu(i, 0),
            dst_gpu=topology.gpu((i + servers // 2) % servers, 0),
            nbytes=nbytes_per_server,
            group=group,
        )
        for i in range(servers)
    )
