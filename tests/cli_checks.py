"""Assertions shared by the CLI tests."""

from __future__ import annotations


def assert_one_line_error(result, *fragments: str, exit_code: int = 2) -> str:
    """Known bad input: exactly one line on the output, starting `error:`, naming the problem; returns it."""
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
