"""Option types the commands share."""

from __future__ import annotations

import click

from bertprep.pipeline.paths import web_url_message


class LocalPath(click.Path):
    """``click.Path`` that refuses a web URL with the fix (download it first) instead of "does not exist"."""

    def convert(self, value, param, ctx):
        message = web_url_message(str(value), "") if value is not None else None
        if message:
            self.fail(message.lstrip(), param, ctx)
        return super().convert(value, param, ctx)
