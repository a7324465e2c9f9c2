"""The database shipped with dse: devices, models, runtimes, technology constants, measured tree acceptance and public measurements, each number with its source."""
