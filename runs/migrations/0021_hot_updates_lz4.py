"""How PostgreSQL stores the rows the run loop rewrites on every iteration (SQLite has no such
settings; nothing changes there).

- Room on each page (fillfactor) of runs_motorrun and runs_attempt: a run's row is updated by
  every fenced write and its attempt's by every reply and result; an update whose new version
  fits on the row's own page changes no index (a HOT update).
- lz4 for an attempt's messages: each reply and result rewrites the whole (growing) array, so
  it is compressed again every time; lz4 does that in about a third of the CPU time of the
  default pglz (bench/README.md). Values written before keep their compression until rewritten.
  Left as it is on a server built without lz4.
"""

from django.db import migrations

#: table -> percent of each page that inserts fill
FILLFACTOR = {"runs_motorrun": 70, "runs_attempt": 70}
#: (table, column) compressed with lz4
LZ4 = [("runs_attempt", "messages")]


def _lz4_available(schema_editor) -> bool:  # type: ignore[no-untyped-def]
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
            "AND 'lz4' = ANY(enumvals)"
        )
        return cursor.fetchone() is not None


def apply(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, percent in FILLFACTOR.items():
        schema_editor.execute(f'ALTER TABLE "{table}" SET (fillfactor = {int(percent)})')
    if _lz4_available(schema_editor):
        for table, column in LZ4:
            schema_editor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION lz4')


def revert(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in FILLFACTOR:
        schema_editor.execute(f'ALTER TABLE "{table}" RESET (fillfactor)')
    for table, column in LZ4:
        schema_editor.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET COMPRESSION DEFAULT')


class Migration(migrations.Migration):
    dependencies = [("runs", "0020_lean_hot_indexes")]

    operations = [migrations.RunPython(apply, revert)]
