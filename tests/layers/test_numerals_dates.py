"""layers/common/numerals_dates.py: one set of tables, read by L3's dates (weekdays 0-6) and L4's sameness (1-7)."""

from __future__ import annotations

from datetime import date

from layers.common.numerals_dates import WEEKDAYS_EN, WEEKDAYS_ZH, cn_numeral, day_number
from layers.conversation.consolidation import sameness
from layers.local.text import dates


def test_weekdays_are_numbered_as_iso_and_each_caller_keeps_its_own_convention():
    wednesday = date(2026, 9, 30)
    assert WEEKDAYS_ZH["三"] == WEEKDAYS_EN["wednesday"] == wednesday.isoweekday() == 3
    assert dates._WEEKDAYS_ZH["三"] == dates._WEEKDAYS_EN["wed"] == wednesday.weekday() == 2
    assert sameness._WEEKDAYS_ZH["三"] == sameness._WEEKDAYS_EN["weds"] == 3
    assert "sat" in dates._WEEKDAYS_EN and "sat" not in sameness._WEEKDAYS_EN
    assert "may" in dates._MONTHS_EN and "may" not in sameness._MONTHS_EN


def test_the_numerals_both_callers_read():
    assert [day_number(t) for t in ("9", "三", "十五", "二十三", "一二")] == [9, 3, 15, 23, 12]
    assert [cn_numeral(t) for t in ("十五", "二零二六", "三千零五", "四一百")] == ["15", "2026", "3005", "四一百"]


def test_a_weekday_means_the_same_day_on_both_sides():
    """上周三 is a Wednesday to L3; 周三 and 星期三 and Wednesday are one anchor to L4."""
    found, _ = dates.find_dates("上周三开了会", date(2026, 9, 30))
    assert found is not None and found.since == date(2026, 9, 23) and found.since.weekday() == 2
    keys = {t.key for text in ("周三", "星期三", "Wednesday") for t in sameness.tokens(text)}
    assert keys == {"weekday:3"}
