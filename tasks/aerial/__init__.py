"""Aerial robots: a Crazyflie-2.x-class quadrotor (``Quadrotor-Hover``, ``Quadrotor-Track``)."""
