"""Library halves of the commands (batch, watch, verify, smoke, explain, lint, scaffold, fixture
checks, schemas). They return results or report through callbacks; they never print."""
