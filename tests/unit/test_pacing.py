"""The paced engine's source, its pure core (jobs.join.pacing.pace): what each stream
admits of the records waiting, given the two PTs (paper §5.2: left_PT + upper = right_PT)."""

from __future__ import annotations

from jobs.join.pacing import ReadAhead, pace, pace_steps

UPPER, DRIFT = 30, 10  # minutes, as plain numbers


def waiting(topic: str, *event_times: int) -> list:
    """Records in arrival order, one partition; an event time of None does not read."""
    return [((topic, 0), ReadAhead(i, i, t, t is not None)) for i, t in enumerate(event_times)]


def admitted(left, right, lpt, rpt) -> tuple[tuple[int, int], list[str]]:
    """How many records each stream admits, and what is paused. The PT statistic here is the 100th
    percentile, so a bound holds for every record admitted (the product's is a low one)."""
    got, paused = pace({"left": left, "right": right}, {"left": lpt, "right": rpt}, upper=UPPER, drift=DRIFT, q=100)
    return (len(got["left"]), len(got["right"])), paused


def test_before_either_pt_is_known_both_streams_are_admitted_whole():
    assert admitted(waiting("l", 1, 2, 3), waiting("r", 5, 6), None, None) == ((3, 2), [])


def test_the_right_stream_never_passes_the_synchronization_point():
    # left PT 100: the right may go up to 130; its 3rd record (131) would pass it (and the left, with
    # the right PT at 120, up to 120 - 30 + 10 = 100)
    assert admitted(waiting("l", 100, 101), waiting("r", 120, 130, 131, 140), 100, 120) == ((1, 2), [])


def test_the_left_stream_may_run_the_drift_past_it_and_is_paused_beyond():
    # right PT 140: the left may go up to 140 - 30 + 10 = 120
    assert admitted(waiting("l", 110, 120, 121), waiting("r", 141), 110, 140) == ((2, 0), [])
    # left PT 125 with right PT 140: 125 + 30 - 140 = 15 > 10, paused; the right catches up
    assert admitted(waiting("l", 126), waiting("r", 141, 150, 155), 125, 140) == ((0, 3), ["left"])


def test_a_right_stream_ahead_of_the_synchronization_point_is_paused():
    assert admitted(waiting("l", 101, 102), waiting("r", 141), 100, 135) == ((2, 0), ["right"])


def test_an_idle_stream_bounds_nothing():
    assert admitted([], waiting("r", 500, 900), 100, 120) == ((0, 2), [])
    assert admitted(waiting("l", 500, 900), [], 100, 120) == ((2, 0), [])


def test_when_neither_fits_the_stream_that_is_not_paused_steps_to_its_next_records():
    # left paused (ahead); the right's next records lie beyond the sync point: the right steps on
    assert admitted(waiting("l", 200), waiting("r", 200, 205, 300), 150, 120) == ((0, 2), ["left"])
    # neither paused, neither fits: the left steps (its events only wait)
    assert admitted(waiting("l", 200, 205, 300), waiting("r", 200), 100, 130) == ((2, 0), [])


def test_records_whose_event_time_does_not_read_do_not_move_the_bound():
    assert admitted(waiting("l", None, None, 100, 101), waiting("r", 125), 100, 120) == ((3, 1), [])


def estimators() -> dict:
    """PT = the largest event time of the latest step (once two steps ascend)."""
    from jobs.join.pt_estimator import PTEstimator

    return {side: PTEstimator(sequence_length=2, statistic=100) for side in ("left", "right")}


def test_a_micro_batch_paces_in_steps_so_both_streams_get_past_the_drift():
    # an hour of both streams, one record a minute: one pace() step moves a PT by at most the drift
    left, right = waiting("l", *range(0, 60)), waiting("r", *range(0, 90))
    one, _ = pace({"left": left, "right": right}, {"left": 0, "right": 30}, upper=UPPER, drift=DRIFT, q=100)
    assert (len(one["left"]), len(one["right"])) == (DRIFT + 1, UPPER + 1)  # up to 10 and up to 30
    pt = {"left": 0, "right": 30}
    got, _, steps = pace_steps({"left": left, "right": right}, pt, estimators(), upper=UPPER, drift=DRIFT, q=100)
    assert steps > 2 and len(got["left"]) == 60  # the whole hour of the left in one micro-batch
    assert pt["left"] == 59 and pt["right"] <= pt["left"] + UPPER  # the right never passed the sync point
    assert [p.offset for _, p in got["right"]] == list(range(len(got["right"])))  # a prefix, in order


def test_steps_stop_where_a_stream_used_up_what_was_read_ahead_of_it():
    # the left has more in Kafka than was read ahead (3 records here): once they are admitted, the
    # right must wait for the next micro-batch's read-ahead instead of treating the left as idle
    left, right = waiting("l", 0, 1, 2), waiting("r", *range(0, 200))
    pt = {"left": 0, "right": 30}
    got, _, _ = pace_steps({"left": left, "right": right}, pt, estimators(), upper=UPPER, drift=DRIFT, q=100)
    assert len(got["left"]) == 3 and pt["right"] <= 2 + UPPER


def test_a_stream_read_to_its_topics_end_is_idle_from_the_next_step_and_the_other_goes_on():
    # the same three left records, but they are all the left topic holds now: the right is not
    # bounded by a left PT that cannot move, and is admitted in this micro-batch, not the next
    left, right = waiting("l", 0, 1, 2), waiting("r", *range(0, 200))
    pt = {"left": 0, "right": 30}
    got, _, _ = pace_steps(
        {"left": left, "right": right}, pt, estimators(), upper=UPPER, drift=DRIFT, q=100, read_to_end={"left"}
    )
    assert len(got["left"]) == 3 and len(got["right"]) == 200


def test_while_a_pt_is_unknown_both_streams_step_in_small_chunks_so_it_is_known_early():
    # the right stream 2 h behind the left, in minutes: at one step per micro-batch until the PTs
    # were known, the left ran its whole read-ahead (3 h here) past the synchronization point
    left, right = waiting("l", *range(120, 300)), waiting("r", *range(0, 180))
    pt: dict = {"left": None, "right": None}
    got, paused, steps = pace_steps(
        {"left": left, "right": right}, pt, estimators(), upper=UPPER, drift=DRIFT, q=100, warmup=20
    )
    assert pt["left"] is not None and pt["right"] is not None and steps > 2
    assert len(got["left"]) == 40  # two chunks of 20, then paused while the right, 2 h behind, catches up
    assert len(got["right"]) == 180 and pt == {"left": 159, "right": 179}  # as far as it was read ahead
    whole, _, _ = pace_steps(
        {"left": left, "right": right}, {"left": None, "right": None}, estimators(), upper=UPPER, drift=DRIFT, q=100,
        warmup=1000,
    )  # fmt: skip
    assert len(whole["left"]) == 180  # without the chunks: all of it in one step, unpaced
