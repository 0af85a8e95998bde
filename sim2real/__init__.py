"""sim2real: randomisation, deploy runtime, robot drivers and ROS bridges."""
