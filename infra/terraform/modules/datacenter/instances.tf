# Instances per role, spread over the private subnets. Names follow the Ansible inventory.

locals {
  counts = {
    zookeeper    = var.zookeeper_count
    broker       = var.broker_count
    mirror       = var.mirror_count
    loader       = var.loader_count
    spark_worker = var.spark_worker_count
  }
  short = { zookeeper = "zk", broker = "broker", mirror = "mirror", loader = "loader", spark_worker = "spark" }
  # One entry per instance: "broker-2" => {role = "broker", index = 1}
  instances = merge([
    for role, n in local.counts : {
      for i in range(n) : "${local.short[role]}-${i + 1}" => { role = role, index = i }
    }
  ]...)
}

resource "aws_instance" "host" {
  for_each               = local.instances
  ami                    = var.ami_id
  instance_type          = var.instance_types[each.value.role]
  key_name               = var.key_name
  subnet_id              = aws_subnet.private[each.value.index % length(aws_subnet.private)].id
  vpc_security_group_ids = [aws_security_group.admin.id, aws_security_group.role[each.value.role].id]

  root_block_device {
    volume_type = "gp3"
    volume_size = each.value.role == "broker" ? var.broker_volume_gb : 40
    encrypted   = true
  }

  metadata_options {
    http_tokens = "required"
  }

  tags = merge(local.tags, {
    Name = "${var.name}-${each.key}"
    Role = each.value.role
  })
}
