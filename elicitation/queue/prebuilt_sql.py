"""Statements of the hot paths built once per process from the models' metadata.

Every create inserts a request and its audit row, every agent call reads its key's row, and every transition
locks its request with its queue, agent and holder: the ORM spent longer building those statements than the
database running them. The SQL is the ORM's (the columns come from `_meta`, so a column another migration adds is written
and read too) and values still go through each field's own preparation and converters.
"""

import functools
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from django.db import connection
from django.db.models import Field, ForeignKey, Model

ModelT = TypeVar("ModelT", bound=Model)


def _returns_pk(model: type[Model]) -> bool:
    """An auto-increment key is the database's to choose; any other (a UUID default) is set before the INSERT."""
    return bool(getattr(model._meta.pk, "db_returning", False))


@functools.cache  # every insert walks it: read from the model's metadata once per process
def _insert_fields(model: type[Model]) -> "list[Field[Any, Any]]":
    pk = model._meta.pk
    return [
        field
        for field in model._meta.concrete_fields
        if not (field is pk and _returns_pk(model)) and not getattr(field, "generated", False)
    ]


@functools.cache
def _insert_sql(model: type[Model], vendor: str) -> str:
    quote, meta = connection.ops.quote_name, model._meta
    fields = _insert_fields(model)
    columns = ", ".join(quote(str(field.column)) for field in fields)
    values = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({values})"  # noqa: S608 - metadata only
    if _returns_pk(model) and connection.features.can_return_columns_from_insert:
        sql += f" RETURNING {quote(str(meta.pk.column))}"
    return sql


def insert(instance: Model) -> None:
    """`instance.save(force_insert=True)` as one prepared statement, for models no signal listens to on save.
    `pre_save` fills `auto_now_add` and similar fields, as save() would; the row is marked saved afterwards."""
    model = type(instance)
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(model, connection.vendor), _values(instance))
        _saved(cursor, instance)


def inserts_in_one_statement() -> bool:
    """Whether `insert_together` writes its rows in one statement, atomic without a transaction around it."""
    return connection.vendor == "postgresql"


def insert_together(*instances: Model) -> None:
    """`insert` for each instance, in order. On PostgreSQL in one statement, every INSERT but the last a writable
    CTE: one round trip, and atomic on its own, so a caller that needs nothing else in its transaction can skip
    BEGIN and COMMIT (two more round trips). Only the last row's key may come from the database."""
    if not inserts_in_one_statement():
        for instance in instances:
            insert(instance)
        return
    *leading, last = instances
    if any(_returns_pk(type(instance)) for instance in leading):
        raise ValueError("only the last row of insert_together may take its key from the database")
    ctes = [
        f"row{index} AS ({_insert_sql(type(row), connection.vendor)})" for index, row in enumerate(leading)
    ]
    sql = (f"WITH {', '.join(ctes)} " if ctes else "") + _insert_sql(type(last), connection.vendor)
    values = [value for instance in instances for value in _values(instance)]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        for instance in leading:
            _saved(cursor, instance)
        _saved(cursor, last)


def _values(instance: Model) -> list[Any]:
    return [
        field.get_db_prep_save(field.pre_save(instance, True), connection)
        for field in _insert_fields(type(instance))
    ]


def _saved(cursor: Any, instance: Model) -> None:
    """Take the key the INSERT returned, if the database chose it, and mark the row saved as save() does."""
    model = type(instance)
    if _returns_pk(model):
        if connection.features.can_return_columns_from_insert:
            instance.pk = cursor.fetchone()[0]
        else:
            pk_column = str(model._meta.pk.column)
            instance.pk = connection.ops.last_insert_id(cursor, model._meta.db_table, pk_column)
    instance._state.adding = False
    instance._state.db = connection.alias


@functools.cache
def _columns(model: type[Model], vendor: str) -> list[tuple[Any, list[Any]]]:
    """Per concrete column, in _meta order: its expression and its field's converters (JSON, for instance)."""
    columns = [field.get_col(model._meta.db_table) for field in model._meta.concrete_fields]
    return [(column, column.get_db_converters(connection)) for column in columns]


def instance_from_row(model: type[Model], row: Sequence[Any]) -> Any:
    """A row of `model`'s concrete columns (in _meta order) as an instance, through Django's own converters: the
    backend's (asked each time: they belong to this thread's connection), then the field's."""
    values = []
    for (column, field_converters), value in zip(_columns(model, connection.vendor), row, strict=True):
        for converter in [*connection.ops.get_db_converters(column), *field_converters]:
            value = converter(value, column, connection)
        values.append(value)
    return model.from_db(connection.alias, [f.attname for f in model._meta.concrete_fields], values)


@functools.cache
def _select_by_sql(model: type[Model], column: str, vendor: str) -> str:
    """`SELECT <every concrete column> FROM <table> WHERE <column> = %s`, for `instance_from_row`."""
    quote, meta = connection.ops.quote_name, model._meta
    columns = ", ".join(quote(str(field.column)) for field in meta.concrete_fields)
    where = quote(str(meta.get_field(column).column))  # type: ignore[union-attr]
    return f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {where} = %s"  # noqa: S608 - metadata only


def get_by(model: type[Model], column: str, value: Any) -> Any:
    """`model.objects.filter(<column>=value).first()` for a unique column, or None."""
    with connection.cursor() as cursor:
        cursor.execute(_select_by_sql(model, column, connection.vendor), [value])
        row = cursor.fetchone()
    return None if row is None else instance_from_row(model, row)


@functools.cache  # every get_with_related walks them
def _foreign_keys(model: type[Model], names: tuple[str, ...]) -> "tuple[ForeignKey[Any, Any], ...]":
    return tuple(cast("ForeignKey[Any, Any]", model._meta.get_field(name)) for name in names)


@functools.cache
def _with_related_sql(
    model: type[Model], relations: tuple[str, ...], extra_columns: tuple[str, ...], lock: bool, vendor: str
) -> str:
    """`SELECT` a row by key with the rows its `relations` (foreign keys) point to, then `extra_columns`; a
    nullable key is a LEFT JOIN, as select_related makes it. `lock` adds the row lock on `model`'s row only."""
    quote, meta = connection.ops.quote_name, model._meta

    def ref(table: str, column: str) -> str:
        return f"{quote(table)}.{quote(column)}"

    columns = [ref(meta.db_table, str(field.column)) for field in meta.concrete_fields]
    joins, tables = [], [meta.db_table]
    for key in _foreign_keys(model, relations):
        related = key.related_model._meta
        columns += [ref(related.db_table, str(column.column)) for column in related.concrete_fields]
        join = "LEFT OUTER JOIN" if key.null else "INNER JOIN"
        target = ref(related.db_table, str(key.target_field.column))
        joins.append(f"{join} {quote(related.db_table)} ON {target} = {ref(meta.db_table, str(key.column))}")
        tables.append(related.db_table)
    if len(set(tables)) != len(tables):
        raise ValueError("each relation must join a table of its own (no aliases here)")
    sql = (
        f"SELECT {', '.join([*columns, *extra_columns])} FROM {quote(meta.db_table)} "  # noqa: S608 - metadata only
        f"{' '.join(joins)} WHERE {ref(meta.db_table, str(meta.pk.column))} = %s"
    )
    if lock and connection.features.has_select_for_update:
        of = (quote(meta.db_table),) if connection.features.has_select_for_update_of else ()
        sql += " " + connection.ops.for_update_sql(of=of)
    return sql


def get_with_related(
    model: type[ModelT],
    pk: Any,
    relations: tuple[str, ...],
    *,
    extra_columns: tuple[str, ...] = (),
    lock: bool = False,
) -> tuple[ModelT, list[Any]] | None:
    """`model.objects.select_related(*relations)[.select_for_update(of=("self",))].filter(pk=pk).first()` and the
    values of `extra_columns` (SQL over `model`'s table), or None. The related rows are cached on the instance as
    select_related leaves them (None for a key that is null), so reading them runs no query."""
    sql = _with_related_sql(model, relations, extra_columns, lock, connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [model._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    start = len(model._meta.concrete_fields)
    instance = instance_from_row(model, row[:start])
    for key in _foreign_keys(model, relations):
        related = key.related_model
        end = start + len(related._meta.concrete_fields)
        present = getattr(instance, key.attname) is not None
        key.set_cached_value(instance, instance_from_row(related, row[start:end]) if present else None)
        start = end
    return instance, list(row[start:])
