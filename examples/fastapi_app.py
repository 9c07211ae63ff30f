"""A FastAPI service with jobledger: it enqueues in its request's transaction and runs a worker in
its lifespan.

    pip install 'jobledger[fastapi]'
    JOBLEDGER_URL=sqlite:///signups.db uvicorn examples.fastapi_app:app

``POST /signups {"email": "ada@example.com"}`` stores a signup and, in the same transaction,
enqueues its welcome mail: the job exists if and only if the signup was stored. The worker runs
in the service's lifespan; its async handler runs on the service's event loop, and marks the
signup welcomed in the transaction that completes the job. ``GET /signups/{email}`` says whether
it was. The database is the ledger's (``JOBLEDGER_URL``): SQLite or PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from jobledger import JobContext, Ledger

ledger = Ledger(os.environ.get("JOBLEDGER_URL", "sqlite:///signups.db"))
POSTGRES = ledger.url.dialect == "postgres"
# The service's own table, beside the ledger's (in its schema on PostgreSQL).
SIGNUPS = f'"{ledger.url.schema}".signups' if POSTGRES else "signups"


def sql(statement: str) -> str:
    """The statement with the placeholders of the database's driver (sqlite3 ``?``, psycopg
    ``%s``)."""
    return statement.replace("?", "%s") if POSTGRES else statement


@contextmanager
def transaction() -> Iterator[Any]:
    """A connection on the service's database, in a transaction that commits on leaving the
    block (and rolls back if it raises)."""
    url = ledger.url
    if POSTGRES:
        import psycopg

        conn: Any = psycopg.connect(url.conninfo)
    else:
        conn = sqlite3.connect(url.sqlite_path, timeout=30)
    try:
        yield conn
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


@ledger.task(queue="welcome", max_attempts=5, timeout=30)
async def send_welcome(ctx: JobContext, email: str) -> None:
    """Send the welcome mail (here: nothing), then mark the signup welcomed in the transaction
    that completes the job. Runs on the service's event loop; the database calls are blocking,
    so they run in a thread."""
    await asyncio.sleep(0)  # e.g. `await mailer.send(...)` with the service's async client

    def mark_welcomed() -> None:
        with ctx.transaction() as conn:
            conn.execute(sql(f"UPDATE {SIGNUPS} SET welcomed = 1 WHERE email = ?"), (email,))

    await asyncio.to_thread(mark_welcomed)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    def prepare() -> None:
        ledger.migrate()
        with transaction() as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SIGNUPS} "
                "(email text PRIMARY KEY, welcomed integer NOT NULL DEFAULT 0)"
            )

    await asyncio.to_thread(prepare)
    # Started from the running loop: async handlers run on it, the worker's claims and writes
    # on its own threads. On shutdown it stops claiming and lets running jobs finish (10 s).
    async with ledger.worker(["welcome"], concurrency=8, grace_seconds=10):
        yield


app = FastAPI(title="signups", lifespan=lifespan)


class Signup(BaseModel):
    email: str


@app.post("/signups", status_code=201)
def sign_up(signup: Signup) -> dict[str, Any]:
    # A sync endpoint: FastAPI runs it in a thread, so its blocking calls do not hold the loop.
    with transaction() as conn:
        conn.execute(
            sql(f"INSERT INTO {SIGNUPS} (email) VALUES (?) ON CONFLICT (email) DO NOTHING"),
            (signup.email,),
        )
        job = ledger.enqueue(
            send_welcome, {"email": signup.email}, key=f"welcome:{signup.email}", conn=conn
        )
    return {"email": signup.email, "job": job.id, "created": job.created}


@app.get("/signups/{email}")
def signup_status(email: str) -> dict[str, Any]:
    with transaction() as conn:
        row = conn.execute(sql(f"SELECT welcomed FROM {SIGNUPS} WHERE email = ?"), (email,)).fetchone()
    if row is None:
        raise HTTPException(404, f"no signup for {email}")
    return {"email": email, "welcomed": bool(row[0])}
