"""The database shipped with dse: devices, models, runtimes, technology constants and public measurements, each number with its source."""
