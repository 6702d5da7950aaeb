"""The ports the embedded services listen on (broker, cluster nodes, Spark, Airflow's UI): picked
where no other process's outgoing connection can be handed one before the service binds it."""

from __future__ import annotations

import socket

from jobs.local import kafka_setup
from jobs.local.kafka_setup import LISTEN_PORTS_FROM, ephemeral_ports, free_ports


def test_listen_ports_come_from_below_the_kernels_ephemeral_range_and_are_free():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(LISTEN_PORTS_FROM <= p < ephemeral_ports().start for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_another_process_listens_on_is_passed_over(monkeypatch):
    taken, spare = free_ports(2)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        monkeypatch.setattr(kafka_setup.random, "sample", lambda population, k: [taken, spare])
        assert free_ports(1) == [spare]


def test_with_no_room_below_the_ephemeral_range_the_kernel_picks(tmp_path, monkeypatch):
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text(f"{LISTEN_PORTS_FROM + 50}\t65000\n")
    monkeypatch.setattr(kafka_setup, "_EPHEMERAL_RANGE", narrow)
    assert ephemeral_ports() == range(LISTEN_PORTS_FROM + 50, 65001)

    def no_sampling(population, k):
        raise AssertionError("50 ports below the range are no room to look for 3")

    monkeypatch.setattr(kafka_setup.random, "sample", no_sampling)
    ports = free_ports(3)  # bound to port 0: the kernel's own choice
    assert len(set(ports)) == 3 and all(p >= 1024 for p in ports)
